package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// jsonParser walks a JSON document token by token with encoding/json's Decoder. Unlike
// json.Unmarshal, which silently keeps the last of repeated keys, it sees every key, so a
// tensor listed twice is caught. Its errors are *FormatError values naming path and, when
// given, the tensor being read.
type jsonParser struct {
	dec  *json.Decoder
	path string
}

func newJSONParser(data []byte, path string) *jsonParser {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keeps integers exact and lets "2.0" be told apart from "2"
	return &jsonParser{dec: dec, path: path}
}

// token reads the next token; reaching the end of the input is an error.
func (p *jsonParser) token(tensor string) (json.Token, error) {
	tok, err := p.dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, &FormatError{Path: p.path, Tensor: tensor, Msg: "invalid JSON", Err: err}
	}
	return tok, nil
}

// object reads an object, or null, calling field with each key while the decoder sits at
// that key's value; field must consume the value. It reports whether the value was an
// object rather than null, and rejects a key that appears twice.
func (p *jsonParser) object(tensor, what string, field func(key string) error) (bool, error) {
	tok, err := p.token(tensor)
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	if tok != json.Delim('{') {
		return false, formatErrorf(p.path, tensor, "%s is a JSON %s, not an object", what, jsonKind(tok))
	}
	seen := make(map[string]bool)
	for p.dec.More() {
		tok, err := p.token(tensor)
		if err != nil {
			return false, err
		}
		key := tok.(string) // the decoder only yields strings in key position
		if seen[key] {
			return false, formatErrorf(p.path, tensor, "%s: key %q appears twice", what, key)
		}
		seen[key] = true
		if err := field(key); err != nil {
			return false, err
		}
	}
	_, err = p.token(tensor) // the closing brace
	return true, err
}

// string reads a string value.
func (p *jsonParser) string(tensor, what string) (string, error) {
	tok, err := p.token(tensor)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", formatErrorf(p.path, tensor, "%s is a JSON %s, not a string", what, jsonKind(tok))
	}
	return s, nil
}

// naturals reads an array of non-negative integers that fit in an int64.
func (p *jsonParser) naturals(tensor, what string) ([]int64, error) {
	tok, err := p.token(tensor)
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, formatErrorf(p.path, tensor, "%s is a JSON %s, not an array", what, jsonKind(tok))
	}
	values := []int64{} // not nil: a scalar's shape is present but empty
	for p.dec.More() {
		tok, err := p.token(tensor)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, formatErrorf(p.path, tensor, "%s holds a JSON %s, not a number", what, jsonKind(tok))
		}
		v, err := strconv.ParseInt(num.String(), 10, 64)
		switch {
		case v < 0: // ParseInt reports out-of-range negatives as math.MinInt64
			return nil, formatErrorf(p.path, tensor, "%s: %s is negative", what, num)
		case errors.Is(err, strconv.ErrRange):
			return nil, formatErrorf(p.path, tensor, "%s: %s does not fit in 64 bits", what, num)
		case err != nil:
			return nil, formatErrorf(p.path, tensor, "%s: %s is not an integer", what, num)
		}
		values = append(values, v)
	}
	_, err = p.token(tensor) // the closing bracket
	return values, err
}

// raw reads any value and returns its text.
func (p *jsonParser) raw(tensor string) (json.RawMessage, error) {
	var msg json.RawMessage
	if err := p.dec.Decode(&msg); err != nil {
		return nil, &FormatError{Path: p.path, Tensor: tensor, Msg: "invalid JSON", Err: err}
	}
	return msg, nil
}

// end checks that nothing but white space follows the document.
func (p *jsonParser) end() error {
	if _, err := p.dec.Token(); err != io.EOF {
		return formatErrorf(p.path, "", "unexpected data after the JSON object")
	}
	return nil
}

// jsonKind names the kind of JSON value that tok starts, for error messages.
func jsonKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}
