package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/tokenizer/internal/jinjaguard"
)

// FuzzEncodeDecode encodes arbitrary input (invalid UTF-8 included) with every fixture
// tokenizer. Nothing may panic; invalid UTF-8 is refused with ErrInvalidUTF8. For valid
// input, decoding the ids gives back the (normalized) text: exactly the input for byte-level
// tokenizers (up to their NFC normalizer) and for the Llama-style tokenizer (when the input
// holds no "▁", which it uses for spaces). The streaming decoder agrees with Decode.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", " ", "Hello, world!", "  two  spaces\n\n", "<|im_start|>user\nhi<|im_end|>", "<s>x</s>",
		"数字 12345", "🙂👩‍💻🇫🇷", "e\u0301", "\xff\xfe", "a\xc3", "'S 'll ſ", "\u00a0\u3000\u2028"} {
		f.Add(s)
	}
	fs := loadFixtures(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, fx := range fs {
			for _, parse := range []bool{false, true} {
				ids, err := fx.tok.EncodeWith(s, EncodeOptions{ParseSpecialTokens: parse, AddSpecialTokens: parse})
				if !utf8.ValidString(s) {
					require.ErrorIs(t, err, ErrInvalidUTF8)
					continue
				}
				require.NoError(t, err)
				for _, id := range ids {
					require.True(t, id >= 0 && id < fx.tok.VocabSize())
				}
				checkStream(t, fx.tok, ids, parse, nil)
				if parse {
					continue
				}
				want := s
				if fx.tok.normalizer != nil {
					if n, ok := fx.tok.normalizer.(unicodeNormalizer); ok {
						want = n.form.String(s)
					}
				}
				switch fx.tok.decoder.(type) {
				case byteLevelDecoder:
					require.Equal(t, want, fx.tok.Decode(ids, false))
				case seqDecoder:
					if !strings.Contains(s, "▁") {
						require.Equal(t, want, fx.tok.Decode(ids, true))
					}
				}
			}
		}
	})
}

// FuzzDecodeStream decodes arbitrary id sequences: every streamed piece is valid UTF-8 and
// the pieces concatenate to Decode.
func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, false)
	f.Add([]byte{0xF0, 0x9F, 0x99, 0x82, 0xFF, 0x10}, true)
	f.Add([]byte("hello world"), false)
	fs := loadFixtures(f)
	f.Fuzz(func(t *testing.T, data []byte, skip bool) {
		for _, fx := range fs {
			byteIDs := byteTokenIDs(fx.tok)
			var ids []int
			for i := 0; i+1 < len(data); i += 2 {
				v := int(data[i])<<8 | int(data[i+1])
				if v&1 == 0 {
					ids = append(ids, byteIDs[(v>>1)%len(byteIDs)])
				} else {
					ids = append(ids, (v>>1)*37%(fx.tok.VocabSize()+3))
				}
			}
			checkStream(t, fx.tok, ids, skip, nil)
		}
	})
}

// FuzzFastMatchers checks the hand-written pre-tokenizer matchers against the regex engine.
func FuzzFastMatchers(f *testing.F) {
	for _, s := range fastMatcherSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		compareFastMatchers(t, s)
	})
}

// FuzzLoad loads arbitrary tokenizer.json and tokenizer_config.json contents. Nothing may
// panic, hang or grow without bound: loading fails with an error, or gives a tokenizer that
// encodes a few texts into ids of its vocabulary, decodes them, and renders its chat
// template (with small limits) or fails cleanly.
func FuzzLoad(f *testing.F) {
	base, perRune := regexBaseTimeout, regexTimeoutPerRune
	regexBaseTimeout, regexTimeoutPerRune = 20*time.Millisecond, 0
	f.Cleanup(func() { regexBaseTimeout, regexTimeoutPerRune = base, perRune })
	specs := []tinySpec{
		{vocab: []string{"a", "b", "ab"}, merges: []string{"a b"}},
		{vocab: append(byteVocab(), "Ġa"), merges: []string{"Ġ a"}, pre: map[string]any{"type": "ByteLevel"}, decoder: map[string]any{"type": "ByteLevel"}},
		{vocab: append([]string{"<unk>", "▁a", "▁", "a"}, fallbackVocab()...), merges: []string{"▁ a"},
			model: map[string]any{"byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true},
			norm:  map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Prepend", "prepend": "▁"}, map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
			decoder: map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
				map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}},
			post: map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<unk>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
				"special_tokens": map[string]any{"<unk>": map[string]any{"id": "<unk>", "ids": []int{0}}}}},
		{vocab: byteVocab(), pre: map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+|(a+)+$`}, "behavior": "MergedWithNext"},
			map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}, map[string]any{"type": "Digits", "individual_digits": true}}},
			added: []map[string]any{{"id": 256, "content": "<s>", "special": true}, {"id": 257, "content": "ab", "lstrip": true, "single_word": true}}},
		{vocab: []string{"a"}, norm: map[string]any{"type": "BertNormalizer"}, pre: map[string]any{"type": "BertPreTokenizer"},
			decoder: map[string]any{"type": "WordPiece"}, model: map[string]any{"continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"}},
	}
	for _, s := range specs {
		f.Add(s.json(f), []byte(`{"bos_token": "<s>", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}`))
	}
	// Small files, so that most mutations still reach the component parsers.
	for _, c := range []string{
		`"normalizer":{"type":"Replace","pattern":{"Regex":"a+"},"content":"bb"}`,
		`"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Lowercase"},{"type":"Strip"},{"type":"Prepend","prepend":"_"}]}`,
		`"pre_tokenizer":{"type":"Split","pattern":{"String":"b"},"behavior":"Contiguous","invert":true}`,
		`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Whitespace"},{"type":"Punctuation"},{"type":"ByteLevel","use_regex":true}]}`,
		`"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"Regex":"b"},"content":"a"},{"type":"Metaspace"},{"type":"BPEDecoder"}]}`,
		`"post_processor":{"type":"RobertaProcessing","sep":["b",1],"cls":["a",0]}`,
		`"added_tokens":[{"id":3,"content":"ab!","special":true,"rstrip":true},{"id":4,"content":"ba","normalized":true}]`,
	} {
		f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2},"merges":["a b"],"unk_token":"a"},`+c+`}`), []byte(`{"eos_token":{"content":"ab!"}}`))
	}
	f.Add(tokenizerWithNormalizer(nestedNormalizer(20)), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"x":[[[[1]]]]},"added_tokens":[{"id":3,"content":"a"}]}`), []byte(`{"chat_template":[{"name":"default","template":"{{ range(5)|list }}"}]}`))
	f.Fuzz(func(t *testing.T, tj, cfg []byte) {
		tok, err := FromBytes(tj, cfg)
		if err != nil {
			return
		}
		for _, text := range []string{"Hello, world!", " a  b\n\tab", "数字 123 🙂", "<s>aaa!</s>"} {
			ids, err := tok.EncodeWith(text, EncodeOptions{AddSpecialTokens: true, ParseSpecialTokens: true})
			if err != nil {
				continue
			}
			for _, id := range ids {
				require.True(t, id >= 0 && id < tok.VocabSize(), "id %d of %d", id, tok.VocabSize())
			}
			s := tok.NewDecodeStream(false)
			require.Equal(t, tok.Decode(ids, false), s.Push(ids...)+s.Flush())
		}
		if tok.HasChatTemplate() {
			_, _ = tok.ApplyChatTemplate(chatMessages, ChatOptions{Limits: fuzzChatLimits})
		}
	})
}

// fuzzChatLimits are the small limits chat templates render with while fuzzing.
var fuzzChatLimits = ChatLimits{MaxIterations: 2000, MaxDepth: 20, MaxOutputBytes: 1 << 16,
	MaxValueBytes: 1 << 16, MaxWorkBytes: 1 << 22, Timeout: 2 * time.Second}

// FuzzChatTemplate renders arbitrary chat templates under small limits. Nothing may panic,
// hang or exhaust memory. And the guard must not change what a template renders: when a
// template renders within the limits, the template engine alone renders the same text (or
// fails as well); when the guard rejects a template as malformed, so does the engine.
func FuzzChatTemplate(f *testing.F) {
	for _, s := range []string{
		"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
		"{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content|trim }} [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}",
		"{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% set ns.n = ns.n + m.content|length %}{% endfor %}{{ ns.n }}",
		"{% macro r(k) %}{% if k > 0 %}{{ r(k - 1) }}{% endif %}{{ k }}{% endmacro %}{{ r(5) }}{{ r(50) }}",
		"{% for x in [[1, [2]], 3] recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}",
		"{{ messages|tojson(indent=2) }}{{ 'a,b'.split(',')|join('-') }}{{ '{0}{1}'.format('x', 'y') }}{{ '%s=%d' % ('a', 1) }}",
		"{{ range(3)|list }}{{ range(10, 0, -3)|list }}{{ range(10**9)|length }}",
		"{% set ns = namespace(s='a') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
		"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
		"{% set a = [] %}{% set _ = a.append(a) %}{{ a }}{{ a == a }}",
		"{% filter upper %}x{{ 1 }}{% endfilter %}{% call range(3) %}{% endcall %}{% raw %}{{ x }}{% endraw %}",
		"{{ 'abc'['a':] }}{{ (messages|first).content[1:-1] }}{{ -1|abs }}{{ not none }}{{ 1 if x is defined else 2 }}",
	} {
		f.Add(s)
	}
	tok := chatTokenizer(f, "x")
	data := tok.chatData(chatMessages, ChatOptions{AddGenerationPrompt: true})
	l := fuzzChatLimits
	limits := jinjaguard.Limits{MaxIterations: l.MaxIterations, MaxDepth: l.MaxDepth, MaxOutputBytes: l.MaxOutputBytes,
		MaxValueBytes: l.MaxValueBytes, MaxWorkBytes: l.MaxWorkBytes, Timeout: l.Timeout}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := jinjaguard.Compile(src)
		if err != nil {
			if errors.Is(err, jinjaguard.ErrTemplate) {
				return
			}
			_, libErr := jinja.Compile(src)
			require.Error(t, libErr, "the guard refused what the engine compiles: %v", err)
			return
		}
		got, err := tmpl.Render(context.Background(), maps.Clone(data), limits)
		if errors.Is(err, jinjaguard.ErrLimit) || strings.Contains(src, "strftime_now") {
			return
		}
		lib, libErr := jinja.Compile(src)
		require.NoError(t, libErr, "the engine refused what the guard compiles")
		want, libErr := renderRecovered(lib, maps.Clone(data))
		if err != nil {
			require.Error(t, libErr, "the guarded render failed with %v", err)
			return
		}
		require.NoError(t, libErr, "only the engine failed")
		require.Equal(t, want, got)
	})
}

// renderRecovered renders tmpl, turning a panic of the engine into an error.
func renderRecovered(tmpl *jinja.Template, data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return tmpl.RenderValues(data)
}
