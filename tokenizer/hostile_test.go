package tokenizer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shortRegexBudget makes a regex search time out after d for the rest of the test.
func shortRegexBudget(t *testing.T, d time.Duration) {
	base, perRune := regexBaseTimeout, regexTimeoutPerRune
	regexBaseTimeout, regexTimeoutPerRune = d, 0
	t.Cleanup(func() { regexBaseTimeout, regexTimeoutPerRune = base, perRune })
}

// catastrophic is a pattern that backtracks exponentially on a run of "a" that it then
// fails to match, and a text that makes it do so: without a budget this search would
// take longer than the age of the universe.
const catastrophic = `(a+)+$`

var catastrophicText = strings.Repeat("a", 60) + "!"

func TestCatastrophicRegexInSplitIsBounded(t *testing.T) {
	shortRegexBudget(t, 50*time.Millisecond)
	tok := tinySpec{vocab: append(byteVocab(), "a"), pre: map[string]any{
		"type": "Split", "pattern": map[string]any{"Regex": catastrophic}, "behavior": "Isolated"}}.build(t)
	_, err := tok.Encode(catastrophicText)
	require.ErrorIs(t, err, ErrRegexBudget)
	require.ErrorContains(t, err, catastrophic, "the error names the pattern")
	// The engine quotes the whole text in its own message; ours does not.
	require.NotContains(t, err.Error(), catastrophicText)
	// Text the pattern handles quickly still encodes.
	ids, err := tok.Encode("aaa")
	require.NoError(t, err)
	require.NotEmpty(t, ids)
}

func TestCatastrophicRegexInNormalizerIsBounded(t *testing.T) {
	shortRegexBudget(t, 50*time.Millisecond)
	tok := tinySpec{vocab: byteVocab(), norm: map[string]any{
		"type": "Replace", "pattern": map[string]any{"Regex": catastrophic}, "content": "x"}}.build(t)
	_, err := tok.Encode(catastrophicText)
	require.ErrorIs(t, err, ErrRegexBudget)
	require.ErrorContains(t, err, catastrophic)
}

func TestCatastrophicRegexInDecoderIsBounded(t *testing.T) {
	shortRegexBudget(t, 50*time.Millisecond)
	tok := tinySpec{vocab: []string{"a", catastrophicText}, decoder: map[string]any{
		"type": "Replace", "pattern": map[string]any{"Regex": catastrophic}, "content": "x"}}.build(t)
	s := tok.NewDecodeStream(false)
	text := s.Push(1, 0, 1) + s.Flush()
	// Decoding cannot fail: the token the pattern could not handle is left as it was, and
	// the stream says why. After the first timeout the pattern is not run again, so "a",
	// which it would have replaced, stays too.
	require.Equal(t, catastrophicText+"a"+catastrophicText, text)
	require.ErrorIs(t, s.Err(), ErrRegexBudget)
	require.ErrorContains(t, s.Err(), catastrophic)
	s2 := tok.NewDecodeStream(false)
	require.Equal(t, catastrophicText, s2.Push(1)+s2.Flush())
	require.ErrorIs(t, s2.Err(), ErrRegexBudget)
	require.ErrorContains(t, s2.Err(), "before")
}

func TestRegexTimeoutGrowsWithTheText(t *testing.T) {
	m, err := compileRegexp2(`\d`)
	require.NoError(t, err)
	_, short, err := m.regex(10)
	require.NoError(t, err)
	_, long, err := m.regex(100 << 20)
	require.NoError(t, err)
	require.Equal(t, regexBaseTimeout, short)
	require.GreaterOrEqual(t, long, (100<<20)*regexTimeoutPerRune)
}

// nestedNormalizer returns a normalizer description nested depth Sequences deep.
func nestedNormalizer(depth int) string {
	var sb strings.Builder
	for range depth {
		sb.WriteString(`{"type":"Sequence","normalizers":[`)
	}
	sb.WriteString(`{"type":"Lowercase"}`)
	for range depth {
		sb.WriteString(`]}`)
	}
	return sb.String()
}

func tokenizerWithNormalizer(norm string) []byte {
	return []byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"normalizer":` + norm + `}`)
}

func TestDeeplyNestedTokenizerJSON(t *testing.T) {
	// Nesting within the bound loads and works.
	tok, err := FromBytes(tokenizerWithNormalizer(nestedNormalizer(maxJSONDepth/2-2)), nil)
	require.NoError(t, err)
	ids, err := tok.EncodeWith("AB", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, ids)
	// Deeper nesting is refused at once with an error that says so.
	for _, depth := range []int{maxJSONDepth, 4000, 100000} {
		_, err := FromBytes(tokenizerWithNormalizer(nestedNormalizer(depth)), nil)
		require.ErrorContains(t, err, "tokenizer.json")
		require.ErrorContains(t, err, fmt.Sprintf("nest deeper than %d levels", maxJSONDepth))
	}
	// Any deep value counts, not only components.
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	_, err = FromBytes([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[],"extra":`+deep+`}}`), nil)
	require.ErrorContains(t, err, "nest deeper")
	_, err = FromBytes(tokenizerWithNormalizer(`null`), []byte(`{"bos_token":`+deep+`}`))
	require.ErrorContains(t, err, "tokenizer_config.json")
	require.ErrorContains(t, err, "nest deeper")
	// Brackets inside strings are text, not nesting.
	tok, err = FromBytes(tokenizerWithNormalizer(`{"type":"Prepend","prepend":"`+strings.Repeat("[{", 1000)+`"}`), nil)
	require.NoError(t, err)
	require.NotNil(t, tok)
}

// BenchmarkLoadNested loads tokenizer.json files whose normalizer nests as deeply as allowed,
// padded to the same size: loading time per byte does not depend on the nesting.
func BenchmarkLoadNested(b *testing.B) {
	for _, depth := range []int{1, maxJSONDepth/2 - 2} {
		pad := strings.Repeat(`{"type":"Lowercase"},`, 50000)
		norm := strings.Replace(nestedNormalizer(depth), `{"type":"Lowercase"}`, pad+`{"type":"Lowercase"}`, 1)
		data := tokenizerWithNormalizer(norm)
		b.Run(fmt.Sprintf("depth%d", depth), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := FromBytes(data, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestTokenIDsAreBounded(t *testing.T) {
	cases := map[string]string{
		"vocab id beyond the tokens": `{"model":{"type":"BPE","vocab":{"a":0,"b":1000000},"merges":[]}}`,
		"vocab id out of range":      `{"model":{"type":"BPE","vocab":{"a":0,"b":2000000000},"merges":[]}}`,
		"negative vocab id":          `{"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}}`,
		"added id beyond the tokens": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":900000000,"content":"<s>"}]}`,
		"added id out of range":      `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":1099511627776,"content":"<s>"}]}`,
		"added id not a number":      `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":"1","content":"<s>"}]}`,
		"added id fractional":        `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":1.5,"content":"<s>"}]}`,
		"post-processor unknown id": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"post_processor":{"type":"TemplateProcessing",
			"single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"id":"<s>","ids":[7]}}}}`,
		"post-processor negative id": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"post_processor":{"type":"RobertaProcessing",
			"sep":["</s>",-2],"cls":["<s>",0]}}`,
	}
	for name, data := range cases {
		_, err := FromBytes([]byte(data), nil)
		require.Error(t, err, name)
		require.ErrorContains(t, err, "tokenizer", name)
	}
	// A small gap in the ids is fine: the id tables grow with the file, not with an id.
	tok, err := FromBytes([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":100},"merges":[]}}`), nil)
	require.NoError(t, err)
	require.Equal(t, 101, tok.VocabSize())
}

func TestMergesMustUseKnownTokens(t *testing.T) {
	for _, merges := range []any{[]string{"a q"}, []string{"q a"}, []string{"a b"}, []string{"ab"}, [][]string{{"a"}}} {
		_, err := FromBytes(tinySpec{vocab: []string{"a", "b"}, merges: merges}.json(t), nil)
		require.Error(t, err, "%v", merges)
		require.ErrorContains(t, err, "merge 0", "%v", merges)
	}
}

func TestAddedTokenContentIsBounded(t *testing.T) {
	long := strings.Repeat("x", maxAddedTokenBytes+1)
	_, err := FromBytes(tinySpec{vocab: []string{"a"}, added: []map[string]any{{"id": 1, "content": long}}}.json(t), nil)
	require.ErrorContains(t, err, fmt.Sprintf("more than the %d allowed", maxAddedTokenBytes))
	// A normalizer may not blow a token up either.
	spec := tinySpec{vocab: []string{"a"}, norm: map[string]any{"type": "Replace", "pattern": map[string]any{"String": "x"}, "content": strings.Repeat("y", 100)},
		added: []map[string]any{{"id": 1, "content": "xxxxxxxxxxxx", "normalized": true}}}
	_, err = FromBytes(spec.json(t), nil)
	require.ErrorContains(t, err, "normalizes to")
}

func TestAddedTokenTrie(t *testing.T) {
	tr := newTokenTrie()
	toks := map[string]*AddedToken{}
	for i, s := range []string{"<abc>", "<a>", "<ab", "<abd>", "<", "xyz"} {
		toks[s] = &AddedToken{ID: i, Content: s}
		tr.add(s, toks[s])
	}
	tr.add("<a>", &AddedToken{ID: 99}) // the first token keeps its content
	for _, c := range []struct {
		text string
		at   int
		want string
	}{
		{"<abc>", 0, "<abc>"}, {"<abd>!", 0, "<abd>"}, {"<abe>", 0, "<ab"}, {"<a>", 0, "<a>"}, {"<x", 0, "<"},
		{"a<abc", 1, "<ab"}, {"xyz", 0, "xyz"}, {"xy", 0, ""}, {"q", 0, ""},
	} {
		tok, end := tr.longestAt(c.text, c.at)
		if c.want == "" {
			require.Nil(t, tok, c.text)
			continue
		}
		require.Same(t, toks[c.want], tok, c.text)
		require.Equal(t, c.at+len(c.want), end, c.text)
	}
}

func TestExpansionIsBounded(t *testing.T) {
	byteLevels := func(key string, n int) map[string]any {
		seq := make([]map[string]any, n)
		for i := range seq {
			seq[i] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}
		}
		return map[string]any{"type": "Sequence", key: seq}
	}
	big := strings.Repeat("y", 1<<16)
	specs := map[string]tinySpec{
		// Each ByteLevel step doubles a text of non-ASCII bytes: 2^40 times without a bound.
		"normalizer ByteLevel chain":    {vocab: byteVocab(), norm: byteLevels("normalizers", 40)},
		"pre-tokenizer ByteLevel chain": {vocab: byteVocab(), pre: byteLevels("pretokenizers", 40)},
		"normalizer Replace":            {vocab: byteVocab(), norm: map[string]any{"type": "Replace", "pattern": map[string]any{"String": "é"}, "content": big}},
		"normalizer Replace regex":      {vocab: byteVocab(), norm: map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": "é"}, "content": big}},
		"normalizer Prepend chain": {vocab: byteVocab(), norm: map[string]any{"type": "Sequence", "normalizers": []map[string]any{
			{"type": "Prepend", "prepend": big}, {"type": "Replace", "pattern": map[string]any{"String": "y"}, "content": "yyyyyyyyyyyyyyyy"},
			{"type": "Replace", "pattern": map[string]any{"String": "y"}, "content": "yyyyyyyyyyyyyyyy"}}}},
	}
	text := strings.Repeat("é", 1000)
	for name, spec := range specs {
		tok := spec.build(t)
		_, err := tok.Encode(text)
		require.ErrorIs(t, err, ErrExpansion, name)
	}
	// Text between added tokens shares one budget: a Prepend on each piece cannot multiply
	// the input by the number of pieces.
	tok := tinySpec{vocab: byteVocab(), norm: map[string]any{"type": "Prepend", "prepend": big},
		added: []map[string]any{{"id": 256, "content": "|", "normalized": false}}}.build(t)
	_, err := tok.EncodeWith(strings.Repeat("a|", 100), EncodeOptions{})
	require.ErrorIs(t, err, ErrExpansion)
	// Real growth stays far inside the budget.
	tok = tinySpec{vocab: byteVocab(), norm: byteLevels("normalizers", 2)}.build(t)
	_, err = tok.Encode(text)
	require.NoError(t, err)

	// A decoder cannot return an error: the step is skipped and the stream says why.
	tok = tinySpec{vocab: []string{"a", "b"}, decoder: map[string]any{
		"type": "Replace", "pattern": map[string]any{"String": "a"}, "content": big}}.build(t)
	s := tok.NewDecodeStream(false)
	require.Equal(t, "ab", s.Push(0, 1)+s.Flush())
	require.ErrorIs(t, s.Err(), ErrExpansion)
}

func TestMalformedByteFallbackTokens(t *testing.T) {
	vocab := []string{"<0xZZ>", "<0x1>", "<0x+1>", "<0x123>", "<0x>", "<0xE2>", "<0x82>", "<0xAC>", "<0x-1>", "<0X41>"}
	tok := tinySpec{vocab: vocab, model: map[string]any{"byte_fallback": true},
		decoder: map[string]any{"type": "ByteFallback"}}.build(t)
	ids := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 0}
	text := tok.Decode(ids, false)
	require.Equal(t, "<0xZZ><0x1>\x01<0x123><0x>€<0x-1><0X41>\uFFFD<0xZZ>", text)
	checkStream(t, tok, ids, false, nil)
}

func TestWrongFieldTypesAreErrors(t *testing.T) {
	model := `"model":{"type":"BPE","vocab":{"a":0},"merges":[]}`
	cases := map[string]string{
		"vocab":                 `{"model":{"type":"BPE","vocab":"a","merges":[]}}`,
		"merges":                `{"model":{"type":"BPE","vocab":{"a":0},"merges":5}}`,
		"dropout":               `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"dropout":"x"}}`,
		"byte_fallback":         `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"byte_fallback":1}}`,
		"added_tokens":          `{` + model + `,"added_tokens":{"id":1}}`,
		"entry 0":               `{` + model + `,"added_tokens":[7]}`,
		"special":               `{` + model + `,"added_tokens":[{"id":1,"content":"x","special":"yes"}]}`,
		"normalizer":            `{` + model + `,"normalizer":5}`,
		"\"String\"":            `{` + model + `,"normalizer":{"type":"Replace","pattern":{"String":5},"content":""}}`,
		"pre-tokenizer":         `{` + model + `,"pre_tokenizer":[1]}`,
		"pretokenizers":         `{` + model + `,"pre_tokenizer":{"type":"Sequence","pretokenizers":{"a":1}}}`,
		"\"replacement\"":       `{` + model + `,"pre_tokenizer":{"type":"Metaspace","replacement":"ab"}}`,
		"\"start\"":             `{` + model + `,"decoder":{"type":"Strip","content":" ","start":"1"}}`,
		"template item":         `{` + model + `,"post_processor":{"type":"TemplateProcessing","single":[5]}}`,
		"\"sep\"":               `{` + model + `,"post_processor":{"type":"BertProcessing","sep":"x","cls":["a",0]}}`,
		"after top-level value": `{` + model + `} {}`,
	}
	for want, data := range cases {
		_, err := FromBytes([]byte(data), nil)
		require.Error(t, err, data)
		require.ErrorContains(t, err, want, data)
	}
	configs := map[string]string{
		"\"bos_token\"":     `{"bos_token":5}`,
		"\"chat_template\"": `{"chat_template":5}`,
		"entry 0":           `{"chat_template":[{"name":"x","template":5}]}`,
		"add_bos_token":     `{"add_bos_token":"yes"}`,
		"want an object":    `[1]`,
	}
	for want, cfg := range configs {
		_, err := FromBytes([]byte(`{`+model+`}`), []byte(cfg))
		require.ErrorContains(t, err, "tokenizer_config.json", cfg)
		require.ErrorContains(t, err, want, cfg)
	}
}

func TestLoadDirRefusesOddFiles(t *testing.T) {
	tj := tinySpec{vocab: []string{"a"}}.json(t)
	write := func(dir, name string, data []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	// A directory where a file should be.
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "tokenizer.json"), 0o755))
	_, err := LoadDir(dir)
	require.ErrorContains(t, err, "not a regular file")
	// Files beyond their size bounds.
	defer func(a, b, c int64) { maxTokenizerJSONBytes, maxConfigBytes, maxChatTemplateBytes = a, b, c }(maxTokenizerJSONBytes, maxConfigBytes, maxChatTemplateBytes)
	maxTokenizerJSONBytes, maxConfigBytes, maxChatTemplateBytes = 1000, 100, 10
	dir = t.TempDir()
	write(dir, "tokenizer.json", append(tj, bytes.Repeat([]byte(" "), 1000)...))
	_, err = LoadDir(dir)
	require.ErrorContains(t, err, "more than the limit of 1000") // internal/regularfile's words
	_, err = Load(bytes.NewReader(append(tj, bytes.Repeat([]byte(" "), 1000)...)), nil)
	require.ErrorContains(t, err, "more than the 1000")
	write(dir, "tokenizer.json", tj)
	write(dir, "tokenizer_config.json", bytes.Repeat([]byte(" "), 101))
	_, err = LoadDir(dir)
	require.ErrorContains(t, err, "tokenizer_config.json")
	write(dir, "tokenizer_config.json", []byte("{}"))
	write(dir, "chat_template.jinja", []byte("{{ messages }}"))
	_, err = LoadDir(dir)
	require.ErrorContains(t, err, "chat_template.jinja")
	write(dir, "chat_template.jinja", []byte("{{ 1 }}"))
	tok, err := LoadDir(dir)
	require.NoError(t, err)
	require.True(t, tok.HasChatTemplate())
}
