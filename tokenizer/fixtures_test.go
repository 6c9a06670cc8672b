package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/stretchr/testify/require"
)

// fixtureCase is one entry of expected.json "cases".
type fixtureCase struct {
	Text               string `json:"text"`
	IDs                []int  `json:"ids"`
	IDsWithSpecial     []int  `json:"ids_with_special"`
	Decoded            string `json:"decoded"`
	DecodedSkipSpecial string `json:"decoded_skip_special"`
}

// fixtureChat is one entry of expected.json "chat".
type fixtureChat struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	AddGenerationPrompt bool   `json:"add_generation_prompt"`
	Rendered            string `json:"rendered"`
}

type fixture struct {
	name  string
	tok   *Tokenizer
	Cases []fixtureCase `json:"cases"`
	Chat  []fixtureChat `json:"chat"`
}

var (
	fixtureCache   = map[string]*fixture{}
	fixtureCacheMu sync.Mutex
)

// loadFixtures loads every tokenizer fixture folder (skipping the test when there are none).
// Tokenizers are loaded once per test binary.
func loadFixtures(tb testing.TB) []*fixture {
	tb.Helper()
	var out []*fixture
	for _, dir := range fixtures.Subdirs(tb, "tokenizers") {
		fixtureCacheMu.Lock()
		f, ok := fixtureCache[dir]
		if !ok {
			f = &fixture{name: filepath.Base(dir)}
			data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
			require.NoError(tb, err)
			require.NoError(tb, json.Unmarshal(data, f))
			f.tok, err = LoadDir(dir)
			require.NoError(tb, err, "loading %s", dir)
			fixtureCache[dir] = f
		}
		fixtureCacheMu.Unlock()
		out = append(out, f)
	}
	return out
}

// TestFixtureEncode checks ids against the Hugging Face tokenizers library. HF's encode
// recognises special tokens written in the text, so the comparison uses
// ParseSpecialTokens: true (this package's default is the opposite; see
// TestSpecialTokensNotParsedByDefault). "ids" is encode(text, add_special_tokens=False) and
// "ids_with_special" is encode(text, add_special_tokens=True).
func TestFixtureEncode(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			require.NotEmpty(t, f.Cases)
			for _, c := range f.Cases {
				ids, err := f.tok.EncodeWith(c.Text, EncodeOptions{ParseSpecialTokens: true})
				require.NoError(t, err)
				require.Equal(t, c.IDs, nonNil(ids), "ids of %q", c.Text)
				ids, err = f.tok.EncodeWith(c.Text, EncodeOptions{ParseSpecialTokens: true, AddSpecialTokens: true})
				require.NoError(t, err)
				require.Equal(t, c.IDsWithSpecial, nonNil(ids), "ids_with_special of %q", c.Text)
			}
		})
	}
}

// TestFixtureDecode checks decoding. The data show that "decoded" is decode(ids) with special
// tokens kept: for llama2, "<s>not special?</s>" decodes to "<s> not special?</s>" from ids,
// whereas ids_with_special would give "<s><s> not special?</s>", and "Hello, world!" would
// start with "<s>". "decoded_skip_special" is the same decode with skip_special_tokens=True,
// which gives the same text from ids and from ids_with_special.
func TestFixtureDecode(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			for _, c := range f.Cases {
				require.Equal(t, c.Decoded, f.tok.Decode(c.IDs, false), "decode of ids of %q", c.Text)
				require.Equal(t, c.DecodedSkipSpecial, f.tok.Decode(c.IDs, true), "skip-special decode of ids of %q", c.Text)
				require.Equal(t, c.DecodedSkipSpecial, f.tok.Decode(c.IDsWithSpecial, true), "skip-special decode of ids_with_special of %q", c.Text)
			}
		})
	}
}

// TestFixtureChat checks the rendered chat prompts against transformers' apply_chat_template.
func TestFixtureChat(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			if len(f.Chat) == 0 {
				// No chat cases: the tokenizer must then have no template and say so.
				if !f.tok.HasChatTemplate() {
					_, err := f.tok.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, ChatOptions{})
					require.ErrorIs(t, err, ErrNoChatTemplate)
				}
				return
			}
			for _, c := range f.Chat {
				msgs := make([]Message, len(c.Messages))
				for i, m := range c.Messages {
					msgs[i] = Message{Role: m.Role, Content: m.Content}
				}
				got, err := f.tok.ApplyChatTemplate(msgs, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt})
				require.NoError(t, err)
				require.Equal(t, c.Rendered, got)
				// The rendered prompt's special tokens are real ones.
				ids, err := f.tok.EncodeChat(msgs, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt})
				require.NoError(t, err)
				want, err := f.tok.EncodeWith(c.Rendered, EncodeOptions{ParseSpecialTokens: true})
				require.NoError(t, err)
				require.Equal(t, want, ids)
				require.Equal(t, c.Rendered, f.tok.Decode(ids, false))
			}
		})
	}
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}
