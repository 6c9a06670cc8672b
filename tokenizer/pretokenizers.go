package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
)

// piece is a stretch of text on its way to the model.
type piece struct {
	text string
	// atStart reports that the piece begins at the very start of the input (what Metaspace's
	// prepend_scheme "first" checks). The reference checks that the piece's first character
	// maps to offset 0 of the input; this flag follows the cuts (added tokens, pre-tokenizer
	// splits) but not a normalizer that deletes leading characters (a left Strip), after which
	// the reference would no longer prepend.
	atStart bool
	// budget bounds what the stages may produce from the text (nil: unlimited).
	budget *growthBudget
}

// emitFunc receives the pieces a pre-tokenizer cuts.
type emitFunc func(piece) error

// preTokenizer cuts a piece into smaller pieces (tokenizer.json "pre_tokenizer"). It never
// emits empty pieces.
type preTokenizer interface {
	split(p piece, emit emitFunc) error
}

// splitBehavior says what happens to the matches of a Split pattern.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(o object, def splitBehavior) (splitBehavior, error) {
	s, ok, err := o.optStr("behavior")
	if err != nil || !ok {
		return def, err
	}
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("%w: split behavior %q", ErrUnsupported, s)
}

// parsePreTokenizer builds a pre-tokenizer from its JSON description; null gives nil.
func parsePreTokenizer(v any) (preTokenizer, error) {
	o, err := asObject(v)
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer: %w", err)
	}
	if o == nil {
		return nil, nil
	}
	typ := o.typeName()
	wrap := func(err error) error { return fmt.Errorf("pre-tokenizer %s: %w", typ, err) }
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, "pretokenizers", parsePreTokenizer, wrap)
		return seqPreTokenizer(seq), err
	case "Split":
		p, err := o.pattern("pattern")
		if err != nil {
			return nil, wrap(err)
		}
		b, err := parseBehavior(o, behaviorIsolated)
		if err != nil {
			return nil, wrap(err)
		}
		inv, err := o.boolean("invert", false)
		if err != nil {
			return nil, wrap(err)
		}
		m, err := p.compile()
		if err != nil {
			return nil, wrap(err)
		}
		return &splitPreTokenizer{m: m, behavior: b, invert: inv}, nil
	case "ByteLevel":
		var b byteLevelPreTokenizer
		if b.addPrefixSpace, err = o.boolean("add_prefix_space", true); err != nil {
			return nil, wrap(err)
		}
		if b.useRegex, err = o.boolean("use_regex", true); err != nil {
			return nil, wrap(err)
		}
		b.mapBytes = true
		return &b, nil
	case "Metaspace":
		var m metaspacePreTokenizer
		if m.replacement, err = o.char("replacement", '▁'); err != nil {
			return nil, wrap(err)
		}
		if m.scheme, err = parsePrependScheme(o); err != nil {
			return nil, wrap(err)
		}
		if m.doSplit, err = o.boolean("split", true); err != nil {
			return nil, wrap(err)
		}
		return m, nil
	case "Whitespace":
		return whitespacePreTokenizer{}, nil
	case "WhitespaceSplit":
		return &splitPreTokenizer{m: charMatcher(unicode.IsSpace), behavior: behaviorRemoved}, nil
	case "Punctuation":
		b, err := parseBehavior(o, behaviorIsolated)
		if err != nil {
			return nil, wrap(err)
		}
		return &splitPreTokenizer{m: charMatcher(isPunctuation), behavior: b}, nil
	case "Digits":
		individual, err := o.boolean("individual_digits", false)
		if err != nil {
			return nil, wrap(err)
		}
		b := behaviorContiguous
		if individual {
			b = behaviorIsolated
		}
		return &splitPreTokenizer{m: charMatcher(unicode.IsNumber), behavior: b}, nil
	case "CharDelimiterSplit":
		d, err := o.char("delimiter", 0)
		if err != nil {
			return nil, wrap(err)
		}
		return &splitPreTokenizer{m: charMatcher(func(r rune) bool { return r == d }), behavior: behaviorRemoved}, nil
	case "BertPreTokenizer":
		return seqPreTokenizer{
			&splitPreTokenizer{m: charMatcher(unicode.IsSpace), behavior: behaviorRemoved},
			&splitPreTokenizer{m: charMatcher(isPunctuation), behavior: behaviorIsolated},
		}, nil
	case "":
		return nil, fmt.Errorf("pre-tokenizer without a type")
	}
	return nil, fmt.Errorf("%w: pre-tokenizer type %q", ErrUnsupported, typ)
}

// isPunctuation is ASCII punctuation (which includes symbols such as $ + < = > ^ ` | ~) or any
// character of a Unicode punctuation category.
func isPunctuation(r rune) bool {
	if r < 0x80 {
		return (r >= '!' && r <= '/') || (r >= ':' && r <= '@') || (r >= '[' && r <= '`') || (r >= '{' && r <= '~')
	}
	return unicode.IsPunct(r)
}

// seqPreTokenizer applies pre-tokenizers one after the other.
type seqPreTokenizer []preTokenizer

func (s seqPreTokenizer) split(p piece, emit emitFunc) error {
	if len(s) == 0 {
		return emit(p)
	}
	// Build the chain of stages once per call: stage i hands its pieces to stage i+1. What
	// each stage hands on is charged to the budget, so that stages that grow the text (a
	// chain of ByteLevel steps doubles it at each) cannot grow it without bound.
	stages := make([]emitFunc, len(s)+1)
	stages[len(s)] = emit
	for i := len(s) - 1; i >= 1; i-- {
		pt, next := s[i], stages[i+1]
		stages[i] = func(q piece) error {
			if err := q.budget.charge(len(q.text), "pre-tokenizer Sequence"); err != nil {
				return err
			}
			return pt.split(q, next)
		}
	}
	return s[0].split(p, stages[1])
}

// splitPreTokenizer cuts a piece around the matches of a pattern.
type splitPreTokenizer struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (sp *splitPreTokenizer) split(p piece, emit emitFunc) error {
	return splitByMatches(p, sp.m, sp.behavior, sp.invert, emit)
}

// splitByMatches cuts p into the ranges between and at the matches of m and combines them
// according to behavior. The ranges are processed as a stream, so a long input never needs
// the whole list of ranges at once.
func splitByMatches(p piece, m matcher, behavior splitBehavior, invert bool, emit emitFunc) error {
	s := p.text
	out := func(start, end int) error {
		if start >= end {
			return nil
		}
		return emit(piece{text: s[start:end], atStart: p.atStart && start == 0, budget: p.budget})
	}
	// The pending range of the merging behaviors.
	var (
		pendStart, pendEnd  int
		pendMatch, havePend bool
		prevMatch           bool
	)
	onRange := func(start, end int, isMatch bool) error {
		if invert {
			isMatch = !isMatch
		}
		switch behavior {
		case behaviorRemoved:
			if !isMatch {
				return out(start, end)
			}
			return nil
		case behaviorIsolated:
			return out(start, end)
		case behaviorMergedWithPrevious, behaviorContiguous:
			// MergedWithPrevious: a match joins the range before it, unless that one was a
			// match too. Contiguous: a range joins the one before it of the same kind.
			join := isMatch && !prevMatch
			if behavior == behaviorContiguous {
				join = isMatch == prevMatch
			}
			if havePend && join {
				pendEnd = end
			} else {
				if havePend {
					if err := out(pendStart, pendEnd); err != nil {
						return err
					}
				}
				pendStart, pendEnd, havePend = start, end, true
			}
			prevMatch = isMatch
			return nil
		case behaviorMergedWithNext:
			// A match joins the range after it, unless that one is a match too.
			if havePend && pendMatch && !isMatch {
				err := out(pendStart, end)
				havePend = false
				return err
			}
			if havePend {
				if err := out(pendStart, pendEnd); err != nil {
					return err
				}
				havePend = false
			}
			if isMatch {
				pendStart, pendEnd, pendMatch, havePend = start, end, true, true
				return nil
			}
			return out(start, end)
		}
		return nil
	}
	prev := 0
	err := m.findAll(s, func(start, end int) error {
		if start > prev {
			if err := onRange(prev, start, false); err != nil {
				return err
			}
		}
		prev = end
		return onRange(start, end, true)
	})
	if err != nil {
		return err
	}
	if prev < len(s) {
		if err := onRange(prev, len(s), false); err != nil {
			return err
		}
	}
	if havePend {
		return out(pendStart, pendEnd)
	}
	return nil
}

// byteLevelPreTokenizer optionally adds a leading space, optionally splits with the GPT-2
// pattern, and maps the bytes of each piece to the byte-level alphabet. When it is the last
// pre-tokenizer the tokenizer leaves the mapping to the model (mapBytes false), which then
// maps only the pieces it has not cached.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	useRegex       bool
	mapBytes       bool
}

func (b *byteLevelPreTokenizer) split(p piece, emit emitFunc) error {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	out := emit
	if b.mapBytes {
		out = func(q piece) error {
			q.text = byteLevelEncode(q.text)
			return emit(q)
		}
	}
	if !b.useRegex {
		return out(p)
	}
	return splitByMatches(p, gpt2Matcher{}, behaviorIsolated, false, out)
}

// prependScheme says when Metaspace adds the replacement character in front of a piece.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependNever
	prependFirst
)

// parsePrependScheme reads prepend_scheme, or the older add_prefix_space flag.
func parsePrependScheme(o object) (prependScheme, error) {
	if s, ok, err := o.optStr("prepend_scheme"); err != nil {
		return 0, err
	} else if ok {
		switch s {
		case "always":
			return prependAlways, nil
		case "never":
			return prependNever, nil
		case "first":
			return prependFirst, nil
		}
		return 0, fmt.Errorf("%w: prepend_scheme %q", ErrUnsupported, s)
	}
	add, err := o.boolean("add_prefix_space", true)
	if err != nil {
		return 0, err
	}
	if add {
		return prependAlways, nil
	}
	return prependNever, nil
}

// metaspacePreTokenizer replaces spaces with a visible character (usually "▁"), adds one in
// front, and splits so that each piece starts with it.
type metaspacePreTokenizer struct {
	replacement rune
	scheme      prependScheme
	doSplit     bool
}

func (m metaspacePreTokenizer) split(p piece, emit emitFunc) error {
	rep := string(m.replacement)
	s := strings.ReplaceAll(p.text, " ", rep)
	if !strings.HasPrefix(s, rep) {
		if m.scheme == prependAlways || (m.scheme == prependFirst && p.atStart) {
			s = rep + s
		}
	}
	q := piece{text: s, atStart: p.atStart, budget: p.budget}
	if !m.doSplit {
		if s == "" {
			return nil
		}
		return emit(q)
	}
	return splitByMatches(q, literalMatcher(rep), behaviorMergedWithNext, false, emit)
}

// whitespacePreTokenizer keeps the runs of word characters and the runs of other
// non-whitespace characters (the pattern \w+|[^\w\s]+), dropping whitespace.
type whitespacePreTokenizer struct{}

func (whitespacePreTokenizer) split(p piece, emit emitFunc) error {
	s := p.text
	kind := func(r rune) int {
		switch {
		case isWordChar(r):
			return 1
		case unicode.IsSpace(r):
			return 0
		}
		return 2
	}
	start, cur := 0, -1
	for i, r := range s {
		k := kind(r)
		if k != cur {
			if cur > 0 {
				if err := emit(piece{text: s[start:i], atStart: p.atStart && start == 0, budget: p.budget}); err != nil {
					return err
				}
			}
			start, cur = i, k
		}
	}
	if cur > 0 {
		return emit(piece{text: s[start:], atStart: p.atStart && start == 0, budget: p.budget})
	}
	return nil
}

// isWordChar is the Unicode \w class: letters, marks, numbers and connector punctuation.
func isWordChar(r rune) bool {
	if r < 0x80 {
		return r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc)
}
