package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is split and tokenized (tokenizer.json "normalizer").
type normalizer interface {
	normalize(s string) (string, error)
}

// parseNormalizer builds a normalizer from its JSON description; null gives nil.
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	o, err := parseObject(raw)
	if err != nil || o == nil {
		return nil, err
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

func (s seqNormalizer) normalize(text string) (string, error) {
	var err error
	for _, n := range s {
		if text, err = n.normalize(text); err != nil {
			return "", err
		}
	}
	return text, nil
}

// prependNormalizer adds a prefix to any non-empty text.
type prependNormalizer string

func (p prependNormalizer) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return string(p) + s, nil
}

// replaceNormalizer replaces every match of a pattern with fixed content.
type replaceNormalizer struct {
	m       matcher
	content string
}

func (r replaceNormalizer) normalize(s string) (string, error) {
	return replaceAll(s, r.m, r.content)
}

// replaceAll replaces every match of m in s by content.
func replaceAll(s string, m matcher, content string) (string, error) {
	if lit, ok := m.(literalMatcher); ok {
		if lit == "" {
			return s, nil
		}
		return strings.ReplaceAll(s, string(lit), content), nil
	}
	var sb strings.Builder
	prev := 0
	err := m.findAll(s, func(start, end int) error {
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
	sb.WriteString(s[prev:])
	return sb.String(), nil
}

type unicodeNormalizer struct{ form norm.Form }

func (u unicodeNormalizer) normalize(s string) (string, error) {
	return u.form.String(s), nil
}

// lowercaseNormalizer lowercases each character on its own, with the full (not only simple)
// Unicode mapping: U+0130 becomes "i̇" and no context (final sigma) is considered.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) (string, error) {
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

func (st stripNormalizer) normalize(s string) (string, error) {
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

func (stripAccentsNormalizer) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s), nil
}

// byteLevelNormalizer maps every byte to its byte-level character.
type byteLevelNormalizer struct{}

func (byteLevelNormalizer) normalize(s string) (string, error) {
	return byteLevelEncode(s), nil
}

// bertNormalizer is BERT's cleanup: control characters dropped, whitespace made a space,
// CJK ideographs padded with spaces, accents stripped, text lowercased.
type bertNormalizer struct {
	cleanText, chineseChars, stripAccents, lowercase bool
}

func (b bertNormalizer) normalize(s string) (string, error) {
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
		s, _ = stripAccentsNormalizer{}.normalize(norm.NFD.String(s))
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
