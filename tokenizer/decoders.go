package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Decoding turns the token strings of ids back into text (tokenizer.json "decoder"). The
// reference implementation passes the whole list of tokens through each decoder in turn; to
// stream, each decoder here is a stage that consumes tokens as they come and hands on what can
// no longer change. Decode pushes all tokens through the same stages and then flushes them, so
// a stream's pieces always concatenate to exactly the full decode.
//
// Between stages flow chunks. A token is a chunk with start set, then any number of chunks
// continuing it, the last of them with end set; a chunk may have both. Fuse and ByteLevel turn
// everything that follows into one long token that only ends when the stream is flushed, so
// stages after them see many small continuation chunks.

// chunk is part of a token travelling between decoder stages.
type chunk struct {
	s          string
	start, end bool
}

// stage is the running state of one decoder.
type stage interface {
	// push takes the next chunk and appends whatever output is final to out.
	push(c chunk, out []chunk) []chunk
	// flush ends the stream: every input token has ended. It appends the remaining output,
	// closing any open output token.
	flush(out []chunk) []chunk
}

// decoderSpec is a decoder from tokenizer.json; it makes a fresh stage for each decode,
// which reports its errors to r.
type decoderSpec interface {
	newStage(r *decodeReport) stage
}

// decodeReport keeps the first error of a decode. Decoding cannot fail as such: a decoder
// step that fails (a Replace whose regex exceeds its match budget, or whose content would
// grow a token beyond its limit) leaves its token as it was and records why.
type decodeReport struct{ err error }

func (r *decodeReport) add(err error) {
	if r != nil && r.err == nil {
		r.err = err
	}
}

// parseDecoder builds a decoder from its JSON description; null gives nil.
func parseDecoder(v any) (decoderSpec, error) {
	o, err := asObject(v)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	if o == nil {
		return nil, nil
	}
	typ := o.typeName()
	wrap := func(err error) error { return fmt.Errorf("decoder %s: %w", typ, err) }
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, "decoders", parseDecoder, wrap)
		return seqDecoder(seq), err
	case "Replace":
		p, err := o.pattern("pattern")
		if err != nil {
			return nil, wrap(err)
		}
		content, err := o.str("content", "")
		if err != nil {
			return nil, wrap(err)
		}
		var m matcher
		if p.isRegex || p.literal == "" {
			expr := p.regex
			if !p.isRegex {
				expr = ""
			}
			if m, err = compileRegexp2(expr); err != nil {
				return nil, wrap(err)
			}
		} else {
			m = literalMatcher(p.literal)
		}
		// A regex that exceeded its match budget once is not run again: each later token
		// would wait as long.
		var tripped atomic.Bool
		return wholeTokenDecoder(func(r *decodeReport) func(string) []string {
			return func(tok string) []string {
				if tripped.Load() {
					r.add(fmt.Errorf("%w: decoder Replace: the pattern exceeded its match budget before", ErrRegexBudget))
					return []string{tok}
				}
				s, err := replaceAll(tok, m, content, decodedLimit(len(tok)))
				if err != nil {
					if errors.Is(err, ErrRegexBudget) {
						tripped.Store(true)
					}
					r.add(fmt.Errorf("decoder Replace: %w", err))
					s = tok
				}
				return []string{s}
			}
		}), nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		var d stripDecoder
		if d.content, err = o.char("content", ' '); err != nil {
			return nil, wrap(err)
		}
		if d.start, err = o.integer("start", 0); err != nil {
			return nil, wrap(err)
		}
		if d.stop, err = o.integer("stop", 0); err != nil {
			return nil, wrap(err)
		}
		return d, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Metaspace":
		var d metaspaceDecoder
		if d.replacement, err = o.char("replacement", '▁'); err != nil {
			return nil, wrap(err)
		}
		scheme, err := parsePrependScheme(o)
		if err != nil {
			return nil, wrap(err)
		}
		d.dropFirst = scheme != prependNever
		return d, nil
	case "WordPiece":
		prefix, err := o.str("prefix", "##")
		if err != nil {
			return nil, wrap(err)
		}
		cleanup, err := o.boolean("cleanup", true)
		if err != nil {
			return nil, wrap(err)
		}
		return wholeTokenDecoder(func(*decodeReport) func(string) []string {
			first := true
			return func(tok string) []string {
				if !first {
					if strings.HasPrefix(tok, prefix) {
						tok = strings.Replace(tok, prefix, "", 1)
					} else {
						tok = " " + tok
					}
				}
				first = false
				if cleanup {
					tok = cleanupSpaces(tok)
				}
				return []string{tok}
			}
		}), nil
	case "BPEDecoder":
		suffix, err := o.str("suffix", "</w>")
		if err != nil {
			return nil, wrap(err)
		}
		return bpeSuffixDecoder{suffix: suffix}, nil
	case "":
		return nil, fmt.Errorf("decoder without a type")
	}
	return nil, fmt.Errorf("%w: decoder type %q", ErrUnsupported, typ)
}

// cleanupSpaces undoes the spaces English tokenization puts before punctuation and
// contractions (the WordPiece decoder's "cleanup").
func cleanupSpaces(s string) string {
	r := strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
		" n't", "n't", " 'm", "'m", " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re")
	return r.Replace(s)
}

// seqDecoder runs decoders one after the other.
type seqDecoder []decoderSpec

func (s seqDecoder) newStage(r *decodeReport) stage {
	st := &seqStage{stages: make([]stage, len(s)), bufs: make([][]chunk, len(s))}
	for i, d := range s {
		st.stages[i] = d.newStage(r)
	}
	return st
}

type seqStage struct {
	stages []stage
	bufs   [][]chunk
}

// run feeds in through stages[from:], appending the final output to out.
func (s *seqStage) run(from int, in []chunk, out []chunk) []chunk {
	for i := from; i < len(s.stages); i++ {
		buf := s.bufs[i][:0]
		for _, c := range in {
			buf = s.stages[i].push(c, buf)
		}
		s.bufs[i] = buf
		in = buf
	}
	return append(out, in...)
}

func (s *seqStage) push(c chunk, out []chunk) []chunk {
	if len(s.stages) == 0 {
		return append(out, c)
	}
	return s.run(0, []chunk{c}, out)
}

func (s *seqStage) flush(out []chunk) []chunk {
	for i := range s.stages {
		tail := s.stages[i].flush(nil)
		out = s.run(i+1, tail, out)
	}
	return out
}

// wholeTokenDecoder applies a function to each complete token. The function may keep state
// across tokens (it is made fresh for each decode).
type wholeTokenDecoder func(*decodeReport) func(string) []string

func (w wholeTokenDecoder) newStage(r *decodeReport) stage { return &wholeTokenStage{fn: w(r)} }

// decodedLimit is the most bytes a decoder step may make of a token of n bytes.
func decodedLimit(n int) int { return 16*n + 4096 }

type wholeTokenStage struct {
	fn  func(string) []string
	buf strings.Builder
}

func (w *wholeTokenStage) push(c chunk, out []chunk) []chunk {
	if c.start && c.end {
		return appendTokens(out, w.fn(c.s))
	}
	w.buf.WriteString(c.s)
	if !c.end {
		return out
	}
	tok := w.buf.String()
	w.buf.Reset()
	return appendTokens(out, w.fn(tok))
}

func (w *wholeTokenStage) flush(out []chunk) []chunk { return out }

func appendTokens(out []chunk, toks []string) []chunk {
	for _, t := range toks {
		out = append(out, chunk{s: t, start: true, end: true})
	}
	return out
}

// tokenAssembler collects the chunks of one token for stages that need whole tokens.
type tokenAssembler struct {
	buf strings.Builder
}

// add returns the whole token once c completes it.
func (a *tokenAssembler) add(c chunk) (string, bool) {
	if c.start && c.end {
		return c.s, true
	}
	a.buf.WriteString(c.s)
	if !c.end {
		return "", false
	}
	tok := a.buf.String()
	a.buf.Reset()
	return tok, true
}

// byteFallbackDecoder turns runs of "<0xXX>" tokens back into text. A run is decoded as a
// whole: if its bytes are valid UTF-8 they become one token, otherwise each byte becomes
// U+FFFD. A run can therefore only be emitted once the next token shows that it has ended.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) newStage(r *decodeReport) stage { return &byteFallbackStage{} }

type byteFallbackStage struct {
	asm tokenAssembler
	run []byte
}

// parseByteToken recognises "<0xXX>"; the two characters after "0x" are read as a
// hexadecimal byte (an optional '+' sign and one digit are accepted too, as Rust does).
func parseByteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	h := tok[3:5]
	if h[0] == '+' {
		h = h[1:]
	}
	v := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return 0, false
		}
		v = v*16 + d
	}
	return byte(v), true
}

func (b *byteFallbackStage) flushRun(out []chunk) []chunk {
	if len(b.run) == 0 {
		return out
	}
	if utf8.Valid(b.run) {
		out = append(out, chunk{s: string(b.run), start: true, end: true})
	} else {
		for range b.run {
			out = append(out, chunk{s: "\uFFFD", start: true, end: true})
		}
	}
	b.run = b.run[:0]
	return out
}

func (b *byteFallbackStage) push(c chunk, out []chunk) []chunk {
	tok, ok := b.asm.add(c)
	if !ok {
		return out
	}
	if v, isByte := parseByteToken(tok); isByte {
		b.run = append(b.run, v)
		return out
	}
	out = b.flushRun(out)
	return append(out, chunk{s: tok, start: true, end: true})
}

func (b *byteFallbackStage) flush(out []chunk) []chunk { return b.flushRun(out) }

// fuseDecoder joins all tokens into one.
type fuseDecoder struct{}

func (fuseDecoder) newStage(r *decodeReport) stage { return &fuseStage{} }

type fuseStage struct{ started bool }

func (f *fuseStage) push(c chunk, out []chunk) []chunk {
	if c.s == "" && f.started {
		return out
	}
	out = append(out, chunk{s: c.s, start: !f.started})
	f.started = true
	return out
}

func (f *fuseStage) flush(out []chunk) []chunk {
	out = append(out, chunk{start: !f.started, end: true})
	f.started = false
	return out
}

// stripDecoder removes up to start leading and up to stop trailing copies of content from each
// token. Trailing copies are held back until the token ends.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) newStage(r *decodeReport) stage { return &stripStage{d: d} }

type stripStage struct {
	d        stripDecoder
	leading  bool // still inside the leading run of the current token
	stripped int  // leading copies removed so far
	held     int  // trailing copies held back
	sb       strings.Builder
}

func (s *stripStage) push(c chunk, out []chunk) []chunk {
	if c.start {
		s.leading, s.stripped, s.held = true, 0, 0
	}
	s.sb.Reset()
	for _, r := range c.s {
		if s.leading {
			if s.stripped < s.d.start && r == s.d.content {
				s.stripped++
				continue
			}
			s.leading = false
		}
		if r == s.d.content && s.d.stop > 0 {
			if s.held == s.d.stop {
				// Only the last stop copies can be stripped: let the oldest one go.
				s.sb.WriteRune(s.d.content)
			} else {
				s.held++
			}
			continue
		}
		for ; s.held > 0; s.held-- {
			s.sb.WriteRune(s.d.content)
		}
		s.sb.WriteRune(r)
	}
	if c.end {
		s.held = 0 // the held trailing copies are stripped
	}
	if s.sb.Len() == 0 && !c.start && !c.end {
		return out
	}
	return append(out, chunk{s: s.sb.String(), start: c.start, end: c.end})
}

func (s *stripStage) flush(out []chunk) []chunk { return out }

// byteLevelDecoder maps byte-level characters back to bytes and decodes them as UTF-8, with a
// replacement character for each invalid sequence. All tokens become one output token;
// incomplete sequences are held until the bytes that complete them arrive.
type byteLevelDecoder struct{}

func (byteLevelDecoder) newStage(r *decodeReport) stage { return &byteLevelStage{} }

type byteLevelStage struct {
	asm     tokenAssembler
	pending []byte
	started bool
	sb      strings.Builder
}

func (b *byteLevelStage) push(c chunk, out []chunk) []chunk {
	tok, ok := b.asm.add(c)
	if !ok {
		return out
	}
	b.pending = byteLevelTokenBytes(b.pending, tok)
	b.sb.Reset()
	held := utf8Lossy(&b.sb, b.pending, false)
	b.pending = append(b.pending[:0], b.pending[len(b.pending)-held:]...)
	if b.sb.Len() == 0 {
		return out
	}
	out = append(out, chunk{s: b.sb.String(), start: !b.started})
	b.started = true
	return out
}

func (b *byteLevelStage) flush(out []chunk) []chunk {
	b.sb.Reset()
	utf8Lossy(&b.sb, b.pending, true)
	b.pending = b.pending[:0]
	out = append(out, chunk{s: b.sb.String(), start: !b.started, end: true})
	b.started = false
	return out
}

// metaspaceDecoder turns the replacement character back into spaces; in the first token it is
// dropped instead (unless the prepend scheme is "never").
type metaspaceDecoder struct {
	replacement rune
	dropFirst   bool
}

func (d metaspaceDecoder) newStage(r *decodeReport) stage { return &metaspaceStage{d: d} }

type metaspaceStage struct {
	d      metaspaceDecoder
	tokens int // tokens started so far
}

func (m *metaspaceStage) push(c chunk, out []chunk) []chunk {
	if c.start {
		m.tokens++
	}
	rep := string(m.d.replacement)
	if strings.Contains(c.s, rep) {
		with := " "
		if m.tokens == 1 && m.d.dropFirst {
			with = ""
		}
		c.s = strings.ReplaceAll(c.s, rep, with)
	}
	return append(out, c)
}

func (m *metaspaceStage) flush(out []chunk) []chunk { return out }

// bpeSuffixDecoder replaces the end-of-word suffix with a space, except in the last token
// where it is removed; the last token is therefore held until the next one arrives.
type bpeSuffixDecoder struct{ suffix string }

func (d bpeSuffixDecoder) newStage(r *decodeReport) stage { return &bpeSuffixStage{d: d} }

type bpeSuffixStage struct {
	d       bpeSuffixDecoder
	asm     tokenAssembler
	last    string
	hasLast bool
}

func (b *bpeSuffixStage) push(c chunk, out []chunk) []chunk {
	tok, ok := b.asm.add(c)
	if !ok {
		return out
	}
	if b.hasLast {
		out = append(out, chunk{s: strings.ReplaceAll(b.last, b.d.suffix, " "), start: true, end: true})
	}
	b.last, b.hasLast = tok, true
	return out
}

func (b *bpeSuffixStage) flush(out []chunk) []chunk {
	if b.hasLast {
		out = append(out, chunk{s: strings.ReplaceAll(b.last, b.d.suffix, ""), start: true, end: true})
		b.hasLast = false
	}
	return out
}
