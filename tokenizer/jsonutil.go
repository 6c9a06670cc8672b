package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/blockdiff/blockdiff/internal/jsondepth"
)

// maxJSONDepth bounds how deeply the arrays and objects of tokenizer.json and
// tokenizer_config.json may nest. Real files nest about five levels; the bound keeps the
// recursive component builders shallow and gives a hostile file a clear error.
const maxJSONDepth = 64

// checkJSONDepth fails when the arrays and objects of data nest deeper than maxJSONDepth.
// It is one pass over the bytes; syntax errors are left to the decoder.
func checkJSONDepth(data []byte) error {
	if _, at := jsondepth.Scan(data, maxJSONDepth); at >= 0 {
		return fmt.Errorf("arrays and objects nest deeper than %d levels (at byte %d)", maxJSONDepth, at)
	}
	return nil
}

// decodeJSON decodes data, which must hold exactly one JSON value, into dst in a single
// pass, with numbers as json.Number. A JSON tree decoded this way is read by the component
// parsers without ever being parsed again, so loading is linear in the size of the file.
func decodeJSON(data []byte, dst any) error {
	if err := checkJSONDepth(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid data after the top-level value")
	}
	return nil
}

// object is one JSON object of a tokenizer.json component, as decodeJSON decodes it.
type object map[string]any

// asObject returns v as an object. A JSON null yields a nil object.
func asObject(v any) (object, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return object(v), nil
	}
	return nil, fmt.Errorf("want an object, got %s", jsonKind(v))
}

// jsonKind names the kind of a decoded JSON value for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// typeName returns the "type" field of o, or "" when it has none.
func (o object) typeName() string {
	s, _ := o["type"].(string)
	return s
}

// has reports whether o holds key with a non-null value.
func (o object) has(key string) bool {
	return o[key] != nil
}

// str reads a string field; absent or null gives def.
func (o object) str(key, def string) (string, error) {
	s, ok, err := o.optStr(key)
	if !ok {
		return def, err
	}
	return s, nil
}

// optStr reads a string field, reporting whether it was present and non-null.
func (o object) optStr(key string) (string, bool, error) {
	v := o[key]
	if v == nil {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, fmt.Errorf("field %q: want a string, got %s", key, jsonKind(v))
	}
	return s, true, nil
}

// boolean reads a bool field; absent or null gives def.
func (o object) boolean(key string, def bool) (bool, error) {
	v := o[key]
	if v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("field %q: want a boolean, got %s", key, jsonKind(v))
	}
	return b, nil
}

// integer reads an integer field; absent or null gives def.
func (o object) integer(key string, def int) (int, error) {
	v := o[key]
	if v == nil {
		return def, nil
	}
	n, err := jsonInt(v)
	if err != nil {
		return 0, fmt.Errorf("field %q: %w", key, err)
	}
	return n, nil
}

// jsonInt reads a decoded JSON integer that fits an int32, the range of token ids.
func jsonInt(v any) (int, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("want an integer, got %s", jsonKind(v))
	}
	n, err := num.Int64()
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %s", num)
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, fmt.Errorf("integer %d out of range", n)
	}
	return int(n), nil
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

// list reads a field holding a JSON array.
func (o object) list(key string) ([]any, error) {
	v := o[key]
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("field %q: want an array, got %s", key, jsonKind(v))
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
	v := o[key]
	if v == nil {
		return pattern{}, fmt.Errorf("missing field %q", key)
	}
	p, err := asObject(v)
	if err != nil {
		return pattern{}, fmt.Errorf("field %q: %w", key, err)
	}
	lit, hasLit, err := p.optStr("String")
	if err != nil {
		return pattern{}, fmt.Errorf("field %q: %w", key, err)
	}
	re, hasRe, err := p.optStr("Regex")
	if err != nil {
		return pattern{}, fmt.Errorf("field %q: %w", key, err)
	}
	switch {
	case hasLit && !hasRe:
		return pattern{literal: lit}, nil
	case hasRe && !hasLit:
		return pattern{regex: re, isRegex: true}, nil
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
func parseSequence[T comparable](o object, key string, parse func(any) (T, error), wrap func(error) error) ([]T, error) {
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

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
