package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpecialTokensNotParsedByDefault checks the prompt-injection default: text that spells a
// special token is not that token unless ParseSpecialTokens is set.
func TestSpecialTokensNotParsedByDefault(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			for _, tok := range f.tok.AddedTokens() {
				if !tok.Special {
					continue
				}
				text := "hi " + tok.Content + " there"
				ids, err := f.tok.Encode(text)
				require.NoError(t, err)
				ids2, err := f.tok.EncodeWith(text, EncodeOptions{})
				require.NoError(t, err)
				for _, id := range append(ids2, ids...) {
					// Only the post-processor may add special tokens.
					if id == tok.ID {
						withPost, _ := f.tok.EncodeWith("hi", EncodeOptions{AddSpecialTokens: true})
						require.Contains(t, withPost, id, "%q smuggled in %s", text, tok.Content)
					}
				}
				require.NotContains(t, ids2, tok.ID)
				require.Equal(t, text, f.tok.Decode(ids2, true), "the text survives as text")
				parsed, err := f.tok.EncodeWith(text, EncodeOptions{ParseSpecialTokens: true})
				require.NoError(t, err)
				require.Contains(t, parsed, tok.ID)
			}
		})
	}
}

func TestChatTemplateInline(t *testing.T) {
	spec := tinySpec{vocab: byteVocab(), decoder: map[string]any{"type": "ByteLevel"},
		pre: map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		added: []map[string]any{{"id": 256, "content": "<s>", "special": true, "normalized": false},
			{"id": 257, "content": "</s>", "special": true, "normalized": false}}}
	cfg := `{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>", "pad_token": null,
	  "chat_template": [
	    {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.name is defined %}({{ m.name }}){% endif %}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}{% if pad_token is defined %}PAD{% endif %}{{ extra | default('') }}"},
	    {"name": "tool_use", "template": "{{ tools | length }} tools"}
	  ]}`
	tok, err := FromBytes(spec.json(t), []byte(cfg))
	require.NoError(t, err)
	require.Equal(t, "<s>", tok.Config().BOSToken)
	require.Equal(t, "</s>", tok.Config().EOSToken)
	eos, ok := tok.EOSTokenID()
	require.True(t, ok)
	require.Equal(t, 257, eos)

	msgs := []Message{{Role: "user", Content: "hi </s>"}, {Role: "assistant", Content: "ok", Extra: map[string]any{"name": "bot"}}}
	out, err := tok.ApplyChatTemplate(msgs, ChatOptions{AddGenerationPrompt: true, Vars: map[string]any{"extra": "!"}})
	require.NoError(t, err)
	require.Equal(t, "<s>[user]hi </s></s>[assistant]ok(bot)</s>[assistant]!", out)
	out, err = tok.ApplyChatTemplate(msgs, ChatOptions{Template: "tool_use", Vars: map[string]any{"tools": []any{map[string]any{"name": "f"}}}})
	require.NoError(t, err)
	require.Equal(t, "1 tools", out)
	_, err = tok.ApplyChatTemplate(msgs, ChatOptions{Template: "missing"})
	require.ErrorIs(t, err, ErrNoChatTemplate)

	ids, err := tok.EncodeChat(msgs[:1], ChatOptions{})
	require.NoError(t, err)
	require.Equal(t, 256, ids[0])
	require.Equal(t, 257, ids[len(ids)-1])

	// No template at all.
	tok, err = FromBytes(spec.json(t), nil)
	require.NoError(t, err)
	require.False(t, tok.HasChatTemplate())
	_, err = tok.ApplyChatTemplate(msgs, ChatOptions{})
	require.ErrorIs(t, err, ErrNoChatTemplate)
}

func TestLoadVariants(t *testing.T) {
	_, err := LoadDir(t.TempDir())
	require.Error(t, err)
	_, err = FromBytes([]byte(`{"model": null}`), nil)
	require.Error(t, err)
	_, err = FromBytes([]byte(`not json`), nil)
	require.Error(t, err)
	for _, f := range loadFixtures(t) {
		require.Greater(t, f.tok.VocabSize(), 1000)
		for _, at := range f.tok.AddedTokens() {
			s, ok := f.tok.IDToToken(at.ID)
			require.True(t, ok)
			require.Equal(t, at.Content, s)
			id, ok := f.tok.TokenToID(at.Content)
			require.True(t, ok)
			require.Equal(t, at.ID, id)
			require.Equal(t, at.Special, f.tok.IsSpecial(at.ID))
		}
		_, ok := f.tok.IDToToken(-1)
		require.False(t, ok)
		_, ok = f.tok.IDToToken(f.tok.VocabSize())
		require.False(t, ok)
	}
}

func TestContainsSpecialToken(t *testing.T) {
	for _, f := range loadFixtures(t) {
		require.False(t, f.tok.ContainsSpecialToken("plain text <think>"))
		for _, at := range f.tok.AddedTokens() {
			if at.Special {
				require.True(t, f.tok.ContainsSpecialToken("x"+at.Content+"y"))
			}
		}
	}
}

func TestLoadReadersAndTemplateFile(t *testing.T) {
	spec := tinySpec{vocab: byteVocab(), decoder: map[string]any{"type": "ByteLevel"},
		pre: map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}}
	data := spec.json(t)
	tok, err := Load(bytes.NewReader(data), strings.NewReader(`{"eos_token": "x"}`))
	require.NoError(t, err)
	require.Equal(t, "x", tok.Config().EOSToken)
	tok, err = Load(bytes.NewReader(data), nil)
	require.NoError(t, err)
	require.False(t, tok.HasChatTemplate())

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o644))
	tok, err = LoadDir(dir)
	require.NoError(t, err)
	out, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, ChatOptions{})
	require.NoError(t, err)
	require.Equal(t, "ab", out)
	ids, err := tok.Encode("ab")
	require.NoError(t, err)
	require.Equal(t, []int{'a', 'b'}, ids)
}
