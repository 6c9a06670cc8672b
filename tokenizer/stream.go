package tokenizer

import "strings"

// DecodeStream decodes ids as they are generated, for streaming text to a reader.
//
// Push returns only text that can no longer change: an incomplete UTF-8 sequence (a byte-level
// token carrying half of a character, or an unfinished run of "<0xXX>" byte-fallback tokens)
// is held back until the ids that complete it arrive, and leading spaces that the decoder strips
// at the start of the text are stripped exactly once. Every returned piece is valid UTF-8, and
// the concatenation of everything Push and Flush return equals Decode of all the ids pushed.
//
// A DecodeStream is not safe for concurrent use; make one per sequence.
type DecodeStream struct {
	t           *Tokenizer
	skipSpecial bool
	st          stage // nil when the tokenizer has no decoder
	tokens      int   // tokens seen, for the space-joining used without a decoder
	buf         []chunk
	sb          strings.Builder
	report      decodeReport
}

// NewDecodeStream starts a streaming decode. With skipSpecial, special tokens are left out,
// as in Decode.
func (t *Tokenizer) NewDecodeStream(skipSpecial bool) *DecodeStream {
	s := &DecodeStream{t: t, skipSpecial: skipSpecial}
	s.reset()
	return s
}

func (s *DecodeStream) reset() {
	s.tokens = 0
	s.st = nil
	if s.t.decoder != nil {
		s.st = s.t.decoder.newStage(&s.report)
	}
}

// Push adds ids to the stream and returns the text that became final. Ids that are not in
// the vocabulary are ignored, as Decode ignores them.
func (s *DecodeStream) Push(ids ...int) string {
	s.sb.Reset()
	for _, id := range ids {
		tok, ok := s.t.tokenOf(id, s.skipSpecial)
		if !ok {
			continue
		}
		s.pushToken(tok)
	}
	return s.sb.String()
}

func (s *DecodeStream) pushToken(tok string) {
	if s.st == nil {
		// Without a decoder, tokens are joined with spaces.
		if s.tokens > 0 {
			s.sb.WriteByte(' ')
		}
		s.tokens++
		s.sb.WriteString(tok)
		return
	}
	s.buf = s.st.push(chunk{s: tok, start: true, end: true}, s.buf[:0])
	for _, c := range s.buf {
		s.sb.WriteString(c.s)
	}
}

// Err reports the first error of a decoder step of tokenizer.json since the stream began:
// a Replace decoder whose regex exceeded its match budget (see ErrRegexBudget) or whose
// content would grow a token too much (see ErrExpansion). Such a step leaves its token as
// it was, so the text is then not what the tokenizer file asks for. Real tokenizers never
// do this; a hostile one can.
func (s *DecodeStream) Err() error { return s.report.err }

// Flush ends the sequence and returns the text still held back (incomplete sequences at the
// very end become U+FFFD, as in Decode). The stream is then empty and may be reused for a new
// sequence.
func (s *DecodeStream) Flush() string {
	s.sb.Reset()
	if s.st != nil {
		s.buf = s.st.flush(s.buf[:0])
		for _, c := range s.buf {
			s.sb.WriteString(c.s)
		}
	}
	s.reset()
	return s.sb.String()
}
