package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBPEMergeForms(t *testing.T) {
	vocab := []string{"a", "b", "c", "ab", "bc", "abc"}
	for name, merges := range map[string]any{
		"string": []string{"a b", "ab c"},
		"array":  [][2]string{{"a", "b"}, {"ab", "c"}},
	} {
		tok := tinySpec{vocab: vocab, merges: merges}.build(t)
		ids, err := tok.EncodeWith("abc", EncodeOptions{})
		require.NoError(t, err, name)
		require.Equal(t, []string{"abc"}, tokens(t, tok, ids), name)
	}
	// The lowest rank wins: "b c" before "a b".
	tok := tinySpec{vocab: vocab, merges: []string{"b c", "a b", "ab c"}}.build(t)
	ids, err := tok.EncodeWith("abc", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "bc"}, tokens(t, tok, ids))
	// Equal ranks resolve left to right: "aaa" is "aa" + "a".
	tok = tinySpec{vocab: []string{"a", "aa"}, merges: []string{"a a"}}.build(t)
	ids, err = tok.EncodeWith("aaaaa", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"aa", "aa", "a"}, tokens(t, tok, ids))
}

func TestBPEByteFallbackAndUnknown(t *testing.T) {
	vocab := append([]string{"<unk>", "a", "b"}, fallbackVocab()...)
	tok := tinySpec{vocab: vocab, model: map[string]any{"byte_fallback": true, "unk_token": "<unk>"}}.build(t)
	ids, err := tok.EncodeWith("aéb", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "<0xC3>", "<0xA9>", "b"}, tokens(t, tok, ids))
	require.Equal(t, "aéb", decodeTokens(t, `{"type":"ByteFallback"}`, tokens(t, tok, ids)))

	// Without byte fallback, unknown characters become <unk>, fused or not.
	for fuse, want := range map[bool][]string{
		true:  {"a", "<unk>", "b"},
		false: {"a", "<unk>", "<unk>", "b"},
	} {
		tok := tinySpec{vocab: []string{"<unk>", "a", "b"}, model: map[string]any{"unk_token": "<unk>", "fuse_unk": fuse}}.build(t)
		ids, err := tok.EncodeWith("axyb", EncodeOptions{})
		require.NoError(t, err)
		require.Equal(t, want, tokens(t, tok, ids), "fuse_unk=%v", fuse)
	}
	// Without an unknown token, unknown characters are dropped.
	tok = tinySpec{vocab: []string{"a", "b"}}.build(t)
	ids, err = tok.EncodeWith("axb", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, tokens(t, tok, ids))
	// An unknown token missing from the vocabulary is an error when needed.
	tok = tinySpec{vocab: []string{"a"}, model: map[string]any{"unk_token": "<unk>"}}.build(t)
	_, err = tok.EncodeWith("ax", EncodeOptions{})
	require.Error(t, err)
}

func TestBPEPrefixSuffixIgnoreMerges(t *testing.T) {
	// continuing_subword_prefix: non-initial characters carry "##".
	tok := tinySpec{
		vocab:  []string{"h", "##e", "##y", "he", "hey"},
		merges: []string{"h ##e", "he ##y"},
		model:  map[string]any{"continuing_subword_prefix": "##"},
	}.build(t)
	ids, err := tok.EncodeWith("hey", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"hey"}, tokens(t, tok, ids))

	// end_of_word_suffix: the last character carries "</w>".
	tok = tinySpec{
		vocab:  []string{"h", "e", "y</w>", "he", "hey</w>"},
		merges: []string{"h e", "he y</w>"},
		model:  map[string]any{"end_of_word_suffix": "</w>"},
	}.build(t)
	ids, err = tok.EncodeWith("hey", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"hey</w>"}, tokens(t, tok, ids))

	// ignore_merges: a word that is a token is taken whole, even without a merge path.
	spec := tinySpec{vocab: []string{"a", "b", "c", "abc"}, merges: []string{}}
	tok = spec.build(t)
	ids, err = tok.EncodeWith("abc", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, tokens(t, tok, ids))
	spec.model = map[string]any{"ignore_merges": true}
	tok = spec.build(t)
	ids, err = tok.EncodeWith("abc", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"abc"}, tokens(t, tok, ids))
}

func TestBPEDropoutUnsupported(t *testing.T) {
	_, err := FromBytes(tinySpec{vocab: []string{"a"}, model: map[string]any{"dropout": 0.1}}.json(t), nil)
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "dropout")
}

func TestUnsupportedComponents(t *testing.T) {
	base := tinySpec{vocab: []string{"a"}}
	cases := map[string]func(*tinySpec){
		"Unigram":        nil,
		"Precompiled":    func(s *tinySpec) { s.norm = map[string]any{"type": "Precompiled", "precompiled_charsmap": ""} },
		"UnicodeScripts": func(s *tinySpec) { s.pre = map[string]any{"type": "UnicodeScripts"} },
		"CTC":            func(s *tinySpec) { s.decoder = map[string]any{"type": "CTC"} },
		"Mystery":        func(s *tinySpec) { s.post = map[string]any{"type": "Mystery"} },
	}
	for name, edit := range cases {
		var data []byte
		if edit == nil {
			data = []byte(`{"model":{"type":"Unigram","vocab":[["a",0.0]]}}`)
		} else {
			s := base
			edit(&s)
			data = s.json(t)
		}
		_, err := FromBytes(data, nil)
		require.ErrorIs(t, err, ErrUnsupported, name)
		require.ErrorContains(t, err, name)
	}
}

func TestNormalizers(t *testing.T) {
	cases := []struct{ desc, in, want string }{
		{`{"type":"Prepend","prepend":"▁"}`, "hi", "▁hi"},
		{`{"type":"Prepend","prepend":"▁"}`, "", ""},
		{`{"type":"Replace","pattern":{"String":" "},"content":"▁"}`, "a b  c", "a▁b▁▁c"},
		{`{"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "}`, "a \t\n b", "a b"},
		{`{"type":"NFC"}`, "e\u0301", "é"},
		{`{"type":"NFD"}`, "é", "e\u0301"},
		{`{"type":"NFKC"}`, "ﬁ①", "fi1"},
		{`{"type":"NFKD"}`, "ﬁé", "fie\u0301"},
		{`{"type":"Lowercase"}`, "HeLLo İ Σ", "hello i\u0307 σ"},
		{`{"type":"Strip","strip_left":true,"strip_right":false}`, "  a  ", "a  "},
		{`{"type":"Strip","strip_left":true,"strip_right":true}`, "\u3000 a \n", "a"},
		{`{"type":"StripAccents"}`, "e\u0301a\u0308", "ea"},
		{`{"type":"ByteLevel"}`, "a b", "aĠb"},
		{`{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true}`, "Héllo\t中\x00", "hello  中 "},
		{`{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]}`, " a b", "▁▁a▁b"},
	}
	for _, c := range cases {
		n, err := parseNormalizer(jsonValue(t, c.desc))
		require.NoError(t, err, c.desc)
		got, err := normalizeText(n, c.in, newGrowthBudget(len(c.in)))
		require.NoError(t, err)
		require.Equal(t, c.want, got, c.desc)
	}
}

func TestSplitBehaviors(t *testing.T) {
	// The examples of the Hugging Face documentation of SplitDelimiterBehavior.
	want := map[string][]string{
		"Removed":            {"the", "final", "countdown"},
		"Isolated":           {"the", "-", "final", "-", "-", "countdown"},
		"MergedWithPrevious": {"the-", "final-", "-", "countdown"},
		"MergedWithNext":     {"the", "-final", "-", "-countdown"},
		"Contiguous":         {"the", "-", "final", "--", "countdown"},
	}
	for b, w := range want {
		p := mustPre(t, `{"type":"Split","pattern":{"String":"-"},"behavior":"`+b+`","invert":false}`)
		require.Equal(t, w, preSplit(t, p, "the-final--countdown", true), b)
		p = mustPre(t, `{"type":"Split","pattern":{"Regex":"-"},"behavior":"`+b+`","invert":false}`)
		require.Equal(t, w, preSplit(t, p, "the-final--countdown", true), b)
	}
	p := mustPre(t, `{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Removed","invert":true}`)
	require.Equal(t, []string{"the", "final", "countdown"}, preSplit(t, p, "the-final--countdown", true))
	// Look-ahead works in Split patterns.
	p = mustPre(t, `{"type":"Split","pattern":{"Regex":"\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false}`)
	require.Equal(t, []string{"a", "  ", " ", "b"}, preSplit(t, p, "a   b", true))
}

func TestPreTokenizers(t *testing.T) {
	cases := []struct {
		desc, in string
		want     []string
	}{
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey friend!", []string{"▁Hey", "▁friend!"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey   friend!", []string{"▁Hey", "▁", "▁", "▁friend!"}},
		{`{"type":"Metaspace","replacement":"▁","add_prefix_space":false}`, "Hey friend!", []string{"Hey", "▁friend!"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":false}`, "a b", []string{"a▁b"}},
		{`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`, "Hello my friend, how is your day going?",
			[]string{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}},
		{`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}`, "a b\n", []string{"aĠbĊ"}},
		{`{"type":"Digits","individual_digits":true}`, "Call 123 please", []string{"Call ", "1", "2", "3", " please"}},
		{`{"type":"Digits","individual_digits":false}`, "Call 123 please", []string{"Call ", "123", " please"}},
		{`{"type":"Whitespace"}`, "Hey man!", []string{"Hey", "man", "!"}},
		{`{"type":"Whitespace"}`, "How are you doing?", []string{"How", "are", "you", "doing", "?"}},
		{`{"type":"WhitespaceSplit"}`, "Hey man!", []string{"Hey", "man!"}},
		{`{"type":"Punctuation","behavior":"Isolated"}`, "Hey friend!     How are you?!?", []string{"Hey friend", "!", "     How are you", "?", "!", "?"}},
		{`{"type":"CharDelimiterSplit","delimiter":"x"}`, "axbxxc", []string{"a", "b", "c"}},
		{`{"type":"BertPreTokenizer"}`, "Hey friend!  How?", []string{"Hey", "friend", "!", "How", "?"}},
		{`{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Digits","individual_digits":true}]}`, "a12 b3", []string{"a", "1", "2", "b", "3"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, preSplit(t, mustPre(t, c.desc), c.in, true), c.desc)
	}
	// prepend_scheme "first" adds the replacement only at the start of the input.
	p := mustPre(t, `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}`)
	require.Equal(t, []string{"▁Hey"}, preSplit(t, p, "Hey", true))
	require.Equal(t, []string{"Hey"}, preSplit(t, p, "Hey", false))
}

func TestDecoders(t *testing.T) {
	cases := []struct {
		desc string
		toks []string
		want string
	}{
		{`{"type":"ByteFallback"}`, []string{"Hey", "friend!"}, "Heyfriend!"},
		{`{"type":"ByteFallback"}`, []string{"<0x61>"}, "a"},
		{`{"type":"ByteFallback"}`, []string{"<0xE5>"}, "\uFFFD"},
		{`{"type":"ByteFallback"}`, []string{"<0xE5>", "<0x8f>"}, "\uFFFD\uFFFD"},
		{`{"type":"ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>"}, "叫"},
		{`{"type":"ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>", "a"}, "叫a"},
		{`{"type":"ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "a"}, "\uFFFD\uFFFDa"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, []string{"▁Hey", "▁friend!"}, "Hey friend!"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, []string{"▁▁a", "▁b"}, "a b"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true}`, []string{"▁Hey", "▁friend!"}, " Hey friend!"},
		{`{"type":"WordPiece","prefix":"##","cleanup":true}`, []string{"##uelo", "Ara", "##új", "##o", "No", "##guera"}, "##uelo Araújo Noguera"},
		{`{"type":"BPEDecoder","suffix":"</w>"}`, []string{"My</w>", "na", "me</w>", "is</w>", "Ja", "son</w>"}, "My name is Jason"},
		{`{"type":"Strip","content":"H","start":1,"stop":0}`, []string{"Hey", " friend!", "HHH"}, "ey friend!HH"},
		{`{"type":"Strip","content":"y","start":0,"stop":1}`, []string{"Hey", " friend!"}, "He friend!"},
		{`{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":1}]}`, []string{" a ", " b  "}, "a  b "},
		{`{"type":"Replace","pattern":{"String":"▁"},"content":" "}`, []string{"▁a", "b▁▁"}, " ab  "},
		{`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`, []string{"Hello", "Ġthere", "Ġdear", "Ġfriend!"}, "Hello there dear friend!"},
		// Invalid UTF-8 becomes one U+FFFD per maximal invalid subsequence.
		{`{"type":"ByteLevel"}`, []string{"ð", "Ł", "¤"}, "\uFFFD"},
		{`{"type":"ByteLevel"}`, []string{"ð", "a"}, "\uFFFDa"},
		{`{"type":"ByteLevel"}`, []string{"<|im_end|>", "Ċ"}, "<|im_end|>\n"},
		{`{"type":"ByteLevel"}`, []string{"a b"}, "a b"},
		{`{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`,
			[]string{"▁Hello", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>", "▁world"}, "Hello🙂 world"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, decodeTokens(t, c.desc, c.toks), "%s %q", c.desc, c.toks)
	}
}

func TestAddedTokenFlags(t *testing.T) {
	vocab := []string{"a", "b", " ", "x", "<mask>"}
	added := func(flags map[string]any) []map[string]any {
		tok := map[string]any{"id": 4, "content": "<mask>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
		for k, v := range flags {
			tok[k] = v
		}
		return []map[string]any{tok}
	}
	opts := EncodeOptions{ParseSpecialTokens: true}
	enc := func(tok *Tokenizer, s string) []string {
		ids, err := tok.EncodeWith(s, opts)
		require.NoError(t, err)
		return tokens(t, tok, ids)
	}
	tok := tinySpec{vocab: vocab, added: added(nil)}.build(t)
	require.Equal(t, []string{"a", " ", "<mask>", " ", "b"}, enc(tok, "a <mask> b"))
	tok = tinySpec{vocab: vocab, added: added(map[string]any{"lstrip": true})}.build(t)
	require.Equal(t, []string{"a", "<mask>", " ", "b"}, enc(tok, "a <mask> b"))
	tok = tinySpec{vocab: vocab, added: added(map[string]any{"rstrip": true})}.build(t)
	require.Equal(t, []string{"a", " ", "<mask>", "b"}, enc(tok, "a <mask>  b"))
	tok = tinySpec{vocab: vocab, added: added(map[string]any{"single_word": true})}.build(t)
	require.Equal(t, []string{"a", " ", "<mask>", " ", "b"}, enc(tok, "a <mask> b"))
	require.NotContains(t, enc(tok, "a<mask>b"), "<mask>")
	// Without ParseSpecialTokens the special token's text is ordinary text.
	ids, err := tok.EncodeWith("<mask>", EncodeOptions{})
	require.NoError(t, err)
	require.NotContains(t, ids, 4)
}

func TestPostProcessors(t *testing.T) {
	vocab := []string{"<s>", "</s>", "a"}
	tok := tinySpec{vocab: vocab, post: map[string]any{
		"type":   "TemplateProcessing",
		"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
		"pair":   []any{},
		"special_tokens": map[string]any{
			"<s>":  map[string]any{"id": "<s>", "ids": []int{0}, "tokens": []string{"<s>"}},
			"</s>": map[string]any{"id": "</s>", "ids": []int{1}, "tokens": []string{"</s>"}},
		},
	}}.build(t)
	ids, err := tok.Encode("aa")
	require.NoError(t, err)
	require.Equal(t, []int{0, 2, 2, 1}, ids)
	ids, err = tok.EncodeWith("aa", EncodeOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{2, 2}, ids)

	tok = tinySpec{vocab: vocab, post: map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 1}, "cls": []any{"<s>", 0}, "trim_offsets": true, "add_prefix_space": false},
	}}}.build(t)
	ids, err = tok.Encode("a")
	require.NoError(t, err)
	require.Equal(t, []int{0, 2, 1}, ids)
}

func TestInvalidUTF8(t *testing.T) {
	tok := tinySpec{vocab: []string{"a"}}.build(t)
	_, err := tok.Encode("a\xffb")
	require.ErrorIs(t, err, ErrInvalidUTF8)
}

func TestUTF8Lossy(t *testing.T) {
	cases := map[string]string{
		"abc":              "abc",
		"\xF0\x9F\x98":     "\uFFFD",             // truncated 4-byte sequence: one replacement
		"\xF0\x9F\x98a":    "\uFFFDa",            // the same, followed by ASCII
		"\xE0\x80\x80":     "\uFFFD\uFFFD\uFFFD", // overlong: E0 cannot take 80
		"\xED\xA0\x80":     "\uFFFD\uFFFD\uFFFD", // surrogate
		"\xC0\xAF":         "\uFFFD\uFFFD",
		"\xF4\x90\x80\x80": "\uFFFD\uFFFD\uFFFD\uFFFD",
		"é\x80":            "é\uFFFD",
	}
	for in, want := range cases {
		var sb stringsBuilder
		utf8Lossy(&sb.Builder, []byte(in), true)
		require.Equal(t, want, sb.String(), "%q", in)
	}
	// Not final: an incomplete tail is held.
	var sb stringsBuilder
	held := utf8Lossy(&sb.Builder, []byte("a\xF0\x9F"), false)
	require.Equal(t, 2, held)
	require.Equal(t, "a", sb.String())
}
