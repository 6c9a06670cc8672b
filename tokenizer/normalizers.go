package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is split and tokenized (tokenizer.json "normalizer").
type normalizer interface {
	// normalize rewrites s; a result longer than limit bytes is an error (see
	// normalizedLimit), checked before it is built where the growth is file-controlled.
	normalize(s string, limit int) (string, error)
}

// ErrExpansion is wrapped by the error of a tokenizer.json component that would grow the
// text beyond its growthBudget: a chain of Replace, Prepend or ByteLevel steps could
// otherwise grow it exponentially.
var ErrExpansion = errors.New("tokenizer: text expanded beyond the limit")

// normalizedLimit is the growth budget for a text of n bytes: the bytes that normalizing and
// pre-tokenizing it may produce, counted at every stage. It is generous for any real
// tokenizer (NFKD expands at most about 11 times, ByteLevel 2 times, Metaspace 3 times, and
// a text passes a few stages) and linear in the input.
func normalizedLimit(n int) int { return 64*n + 1<<20 }

// growthBudget counts down the bytes the stages of one encode may still produce.
type growthBudget struct{ left int }

func newGrowthBudget(n int) *growthBudget { return &growthBudget{left: normalizedLimit(n)} }

// charge takes n bytes produced by what from the budget. A nil budget is unlimited.
func (b *growthBudget) charge(n int, what string) error {
	if b == nil {
		return nil
	}
	if n > b.left {
		return fmt.Errorf("%w: %s produced %d bytes with %d left of the budget of this text (see normalizedLimit)", ErrExpansion, what, n, b.left)
	}
	b.left -= n
	return nil
}

// limit is the most bytes one step may produce now.
func (b *growthBudget) limit() int {
	if b == nil {
		return math.MaxInt
	}
	return b.left
}

// normalizeText runs n on s and charges the result to b.
func normalizeText(n normalizer, s string, b *growthBudget) (string, error) {
	out, err := n.normalize(s, b.limit())
	if err != nil {
		return "", err
	}
	return out, b.charge(len(out), "normalizer")
}

// checkGrowth fails when s exceeds limit.
func checkGrowth(s string, limit int, what string) error {
	if len(s) > limit {
		return fmt.Errorf("%w: %s made a text of %d bytes, more than the %d allowed", ErrExpansion, what, len(s), limit)
	}
	return nil
}

// parseNormalizer builds a normalizer from its JSON description; null gives nil.
func parseNormalizer(v any) (normalizer, error) {
	o, err := asObject(v)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if o == nil {
		return nil, nil
	}
	typ := o.typeName()
	wrap := func(err error) error { return fmt.Errorf("normalizer %s: %w", typ, err) }
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, "normalizers", parseNormalizer, wrap)
		return seqNormalizer(seq), err
	case "Prepend":
		s, err := o.str("prepend", "")
		if err != nil {
			return nil, wrap(err)
		}
		return prependNormalizer(s), nil
	case "Replace":
		p, err := o.pattern("pattern")
		if err != nil {
			return nil, wrap(err)
		}
		content, err := o.str("content", "")
		if err != nil {
			return nil, wrap(err)
		}
		m, err := p.compile()
		if err != nil {
			return nil, wrap(err)
		}
		return replaceNormalizer{m: m, content: content}, nil
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		l, err := o.boolean("strip_left", true)
		if err != nil {
			return nil, wrap(err)
		}
		r, err := o.boolean("strip_right", true)
		if err != nil {
			return nil, wrap(err)
		}
		return stripNormalizer{left: l, right: r}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "ByteLevel":
		return byteLevelNormalizer{}, nil
	case "BertNormalizer":
		var b bertNormalizer
		if b.cleanText, err = o.boolean("clean_text", true); err != nil {
			return nil, wrap(err)
		}
		if b.chineseChars, err = o.boolean("handle_chinese_chars", true); err != nil {
			return nil, wrap(err)
		}
		if b.lowercase, err = o.boolean("lowercase", true); err != nil {
			return nil, wrap(err)
		}
		if b.stripAccents, err = o.boolean("strip_accents", b.lowercase); err != nil {
			return nil, wrap(err)
		}
		return b, nil
	case "":
		return nil, fmt.Errorf("normalizer without a type")
	}
	return nil, fmt.Errorf("%w: normalizer type %q", ErrUnsupported, typ)
}

type seqNormalizer []normalizer

func (s seqNormalizer) normalize(text string, limit int) (string, error) {
	var err error
	for _, n := range s {
		if text, err = n.normalize(text, limit); err != nil {
			return "", err
		}
		if err := checkGrowth(text, limit, "normalizer Sequence"); err != nil {
			return "", err
		}
	}
	return text, nil
}

// prependNormalizer adds a prefix to any non-empty text.
type prependNormalizer string

func (p prependNormalizer) normalize(s string, limit int) (string, error) {
	if s == "" {
		return s, nil
	}
	if len(p)+len(s) > limit {
		return "", fmt.Errorf("%w: normalizer Prepend of %d bytes to a text allowed at most %d", ErrExpansion, len(p), limit)
	}
	return string(p) + s, nil
}

// replaceNormalizer replaces every match of a pattern with fixed content.
type replaceNormalizer struct {
	m       matcher
	content string
}

func (r replaceNormalizer) normalize(s string, limit int) (string, error) {
	return replaceAll(s, r.m, r.content, limit)
}

// replaceAll replaces every match of m in s by content, failing when the result would
// exceed limit bytes.
func replaceAll(s string, m matcher, content string, limit int) (string, error) {
	tooLong := func() error {
		return fmt.Errorf("%w: Replace with %d bytes of content made a text longer than %d bytes", ErrExpansion, len(content), limit)
	}
	if lit, ok := m.(literalMatcher); ok {
		if lit == "" {
			return s, nil
		}
		if n := strings.Count(s, string(lit)); len(content) > len(lit) && n > 0 &&
			(len(content)-len(lit)) > (limit-len(s))/n {
			return "", tooLong()
		}
		return strings.ReplaceAll(s, string(lit), content), nil
	}
	var sb strings.Builder
	prev := 0
	err := m.findAll(s, func(start, end int) error {
		if sb.Len()+(start-prev)+len(content) > limit {
			return tooLong()
		}
		sb.WriteString(s[prev:start])
		sb.WriteString(content)
		prev = end
		return nil
	})
	if err != nil {
		return "", err
	}
	if prev == 0 && sb.Len() == 0 {
		return s, nil
	}
	if sb.Len()+len(s)-prev > limit {
		return "", tooLong()
	}
	sb.WriteString(s[prev:])
	return sb.String(), nil
}

type unicodeNormalizer struct{ form norm.Form }

func (u unicodeNormalizer) normalize(s string, _ int) (string, error) {
	return u.form.String(s), nil
}

// lowercaseNormalizer lowercases each character on its own, with the full (not only simple)
// Unicode mapping: U+0130 becomes "i̇" and no context (final sigma) is considered.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string, _ int) (string, error) {
	return lowercase(s), nil
}

func lowercase(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if r >= 'A' && r <= 'Z' {
				r += 'a' - 'A'
			}
			sb.WriteByte(byte(r))
		case r == 'İ':
			sb.WriteString("i\u0307")
		default:
			sb.WriteRune(unicode.ToLower(r))
		}
	}
	return sb.String()
}

// stripNormalizer removes leading and/or trailing whitespace.
type stripNormalizer struct{ left, right bool }

func (st stripNormalizer) normalize(s string, _ int) (string, error) {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// stripAccentsNormalizer removes non-spacing marks (it is meant to follow NFD/NFKD).
type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string, _ int) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s), nil
}

// byteLevelNormalizer maps every byte to its byte-level character.
type byteLevelNormalizer struct{}

func (byteLevelNormalizer) normalize(s string, _ int) (string, error) {
	return byteLevelEncode(s), nil
}

// bertNormalizer is BERT's cleanup: control characters dropped, whitespace made a space,
// CJK ideographs padded with spaces, accents stripped, text lowercased.
type bertNormalizer struct {
	cleanText, chineseChars, stripAccents, lowercase bool
}

func (b bertNormalizer) normalize(s string, _ int) (string, error) {
	if b.cleanText {
		s = strings.Map(func(r rune) rune {
			switch {
			case r == 0 || r == 0xFFFD || isBertControl(r):
				return -1
			case r == '\t' || r == '\n' || r == '\r' || unicode.IsSpace(r):
				return ' '
			}
			return r
		}, s)
	}
	if b.chineseChars {
		var sb strings.Builder
		for _, r := range s {
			if isCJKIdeograph(r) {
				sb.WriteByte(' ')
				sb.WriteRune(r)
				sb.WriteByte(' ')
			} else {
				sb.WriteRune(r)
			}
		}
		s = sb.String()
	}
	if b.stripAccents {
		s, _ = stripAccentsNormalizer{}.normalize(norm.NFD.String(s), 0)
	}
	if b.lowercase {
		s = lowercase(s)
	}
	return s, nil
}

// isBertControl reports characters of the Unicode "Other" categories Cc, Cf, Co and Cs (not
// unassigned code points), except tab, line feed and carriage return, which count as
// whitespace.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

func isCJKIdeograph(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
