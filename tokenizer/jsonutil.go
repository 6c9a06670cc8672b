package tokenizer

import (
	"encoding/json"
	"fmt"
)

// object is one JSON object of a tokenizer.json component, kept raw until its type is known.
type object map[string]json.RawMessage

// parseObject decodes raw as a JSON object. A JSON null yields a nil object.
func parseObject(raw json.RawMessage) (object, error) {
	if isNull(raw) {
		return nil, nil
	}
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	return o, nil
}

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case 'n':
			return string(trimSpaceJSON(raw)) == "null"
		default:
			return false
		}
	}
	return true
}

func trimSpaceJSON(raw []byte) []byte {
	i, j := 0, len(raw)
	for i < j && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	for j > i && (raw[j-1] == ' ' || raw[j-1] == '\t' || raw[j-1] == '\n' || raw[j-1] == '\r') {
		j--
	}
	return raw[i:j]
}

// typeName returns the "type" field of o, or "" when it has none.
func (o object) typeName() string {
	var s string
	if raw, ok := o["type"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// has reports whether o holds key with a non-null value.
func (o object) has(key string) bool {
	raw, ok := o[key]
	return ok && !isNull(raw)
}

// str reads a string field; absent or null gives def.
func (o object) str(key, def string) (string, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("field %q: %w", key, err)
	}
	return s, nil
}

// optStr reads a string field, reporting whether it was present and non-null.
func (o object) optStr(key string) (string, bool, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, fmt.Errorf("field %q: %w", key, err)
	}
	return s, true, nil
}

// boolean reads a bool field; absent or null gives def.
func (o object) boolean(key string, def bool) (bool, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("field %q: %w", key, err)
	}
	return b, nil
}

// integer reads an integer field; absent or null gives def.
func (o object) integer(key string, def int) (int, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("field %q: %w", key, err)
	}
	return n, nil
}

// char reads a field that must hold exactly one character.
func (o object) char(key string, def rune) (rune, error) {
	s, ok, err := o.optStr(key)
	if err != nil || !ok {
		return def, err
	}
	r := []rune(s)
	if len(r) != 1 {
		return 0, fmt.Errorf("field %q: want one character, got %q", key, s)
	}
	return r[0], nil
}

// list reads a field holding a JSON array of raw elements.
func (o object) list(key string) ([]json.RawMessage, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("field %q: %w", key, err)
	}
	return l, nil
}

// pattern is the {"String": ...} or {"Regex": ...} form used by Split and Replace.
type pattern struct {
	literal string
	regex   string
	isRegex bool
}

func (o object) pattern(key string) (pattern, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return pattern{}, fmt.Errorf("missing field %q", key)
	}
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return pattern{}, fmt.Errorf("field %q: %w", key, err)
	}
	switch {
	case p.String != nil && p.Regex == nil:
		return pattern{literal: *p.String}, nil
	case p.Regex != nil && p.String == nil:
		return pattern{regex: *p.Regex, isRegex: true}, nil
	}
	return pattern{}, fmt.Errorf("field %q: want exactly one of String or Regex", key)
}

// compile turns the pattern into a matcher.
func (p pattern) compile() (matcher, error) {
	if p.isRegex {
		return compileRegex(p.regex)
	}
	return literalMatcher(p.literal), nil
}

// parseSequence parses the components listed under key of a "Sequence" component, each
// with parse, leaving out null ones. wrap adds context to an error of the list itself.
func parseSequence[T comparable](o object, key string, parse func(json.RawMessage) (T, error), wrap func(error) error) ([]T, error) {
	items, err := o.list(key)
	if err != nil {
		return nil, wrap(err)
	}
	var seq []T
	var none T
	for _, it := range items {
		c, err := parse(it)
		if err != nil {
			return nil, err
		}
		if c != none {
			seq = append(seq, c)
		}
	}
	return seq, nil
}
