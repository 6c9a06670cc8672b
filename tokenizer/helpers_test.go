package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tinySpec describes a small tokenizer.json for tests.
type tinySpec struct {
	vocab   []string // ids are positions
	merges  any      // []string or [][2]string
	model   map[string]any
	norm    any
	pre     any
	post    any
	decoder any
	added   []map[string]any
}

// build makes the tokenizer.json of spec and loads it.
func (s tinySpec) build(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := FromBytes(s.json(t), nil)
	require.NoError(t, err)
	return tok
}

func (s tinySpec) json(t testing.TB) []byte {
	t.Helper()
	vocab := map[string]int{}
	for i, v := range s.vocab {
		vocab[v] = i
	}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": s.merges}
	if s.merges == nil {
		model["merges"] = []string{}
	}
	for k, v := range s.model {
		model[k] = v
	}
	added := s.added
	if added == nil {
		added = []map[string]any{}
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": s.norm, "pre_tokenizer": s.pre,
		"post_processor": s.post, "decoder": s.decoder, "model": model,
	}
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	return data
}

// jsonValue decodes a JSON description the way FromBytes decodes tokenizer.json.
func jsonValue(t testing.TB, desc string) any {
	t.Helper()
	var v any
	require.NoError(t, decodeJSON([]byte(desc), &v), desc)
	return v
}

// tokens returns the token strings of ids.
func tokens(t testing.TB, tok *Tokenizer, ids []int) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		s, ok := tok.IDToToken(id)
		require.True(t, ok, "id %d", id)
		out[i] = s
	}
	return out
}

// byteVocab returns the 256 byte-level characters, in byte order.
func byteVocab() []string {
	v := make([]string, 256)
	for b := range v {
		v[b] = byteToString[b]
	}
	return v
}

// fallbackVocab returns the 256 "<0xXX>" tokens.
func fallbackVocab() []string {
	v := make([]string, 256)
	for b := range v {
		v[b] = "<0x" + string("0123456789ABCDEF"[b>>4]) + string("0123456789ABCDEF"[b&15]) + ">"
	}
	return v
}

// preSplit runs a pre-tokenizer on text and returns the pieces.
func preSplit(t testing.TB, p preTokenizer, text string, atStart bool) []string {
	t.Helper()
	out := []string{}
	err := p.split(piece{text: text, atStart: atStart}, func(q piece) error {
		out = append(out, q.text)
		return nil
	})
	require.NoError(t, err)
	return out
}

// mustPre parses a pre-tokenizer description.
func mustPre(t testing.TB, desc string) preTokenizer {
	t.Helper()
	p, err := parsePreTokenizer(jsonValue(t, desc))
	require.NoError(t, err)
	return p
}

// decodeTokens runs a decoder description on token strings.
func decodeTokens(t testing.TB, desc string, toks []string) string {
	t.Helper()
	d, err := parseDecoder(jsonValue(t, desc))
	require.NoError(t, err)
	st := d.newStage(nil)
	var out []chunk
	for _, tok := range toks {
		out = st.push(chunk{s: tok, start: true, end: true}, out)
	}
	out = st.flush(out)
	s := ""
	for _, c := range out {
		s += c.s
	}
	return s
}

// stringsBuilder wraps strings.Builder so tests can take its address.
type stringsBuilder struct{ strings.Builder }
