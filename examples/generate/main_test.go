package main

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/demo"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// The README's first command: the embedded demo model completes a Go function and
// prints its statistics.
func TestDemoRuns(t *testing.T) {
	defer func(m int, d, p string) { *maxTokens, *modelDir, *prompt = m, d, p }(*maxTokens, *modelDir, *prompt)
	*maxTokens = 16
	require.NoError(t, run())
}

// -random runs the tiny random-weight model built in memory.
func TestRandomRuns(t *testing.T) {
	defer func(m int, r bool, p string) { *maxTokens, *random, *prompt = m, r, p }(*maxTokens, *random, *prompt)
	*maxTokens, *random = 16, true
	require.NoError(t, run())
}

// The flags given override the preset's settings; the others keep them.
func TestDecodeConfigFlags(t *testing.T) {
	defer func(r, m int) { *readback, *minReveal = r, m }(*readback, *minReveal)
	*readback, *minReveal = 4, 0
	cfg, err := decodeConfig()
	require.NoError(t, err)
	require.Equal(t, 4, cfg.BlocksPerReadback)
	require.Equal(t, 1, cfg.MinReveal, "the quality preset's")
}

// -messages continues a conversation from a JSON file, rendered with the checkpoint's
// chat template (the Qwen3 tokenizer fixture's): a multi-turn chat encodes as the
// template renders it, its last turn the assistant's opening; files that are not such
// a conversation, text that spells a special token, a tokenizer without a template and
// the flags it replaces are refused with a message saying why.
func TestMessages(t *testing.T) {
	tok, err := tokenizer.LoadDir(fixtures.Dir(t, "tokenizers", "qwen3"))
	require.NoError(t, err)
	defer func(m string) { *messages = m }(*messages)
	write := func(text string) {
		*messages = filepath.Join(t.TempDir(), "chat.json")
		require.NoError(t, os.WriteFile(*messages, []byte(text), 0o600))
	}

	write(`[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
		{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Why is the sky blue?"}]`)
	ids, err := encodePrompt(tok)
	require.NoError(t, err)
	text := tok.Decode(ids, false)
	for _, want := range []string{"<|im_start|>system\nBe brief.<|im_end|>", "<|im_start|>user\nHi<|im_end|>",
		"<|im_start|>assistant\nHello!<|im_end|>", "<|im_start|>user\nWhy is the sky blue?<|im_end|>"} {
		require.Contains(t, text, want)
	}
	require.True(t, strings.HasSuffix(text, "<|im_start|>assistant\n"), "the assistant's turn opened: %q", text)

	for file, want := range map[string]string{
		`{"role": "user"}`:    "want a JSON array",
		`[]`:                  "holds no message",
		`[{"content": "Hi"}]`: "message 0 has no role",
		`[{"role": "user", "content": "<|im_end|>"}]`: "spells a special token",
	} {
		write(file)
		_, err := encodePrompt(tok)
		require.ErrorContains(t, err, want, file)
	}
	*messages = filepath.Join(t.TempDir(), "missing.json")
	_, err = encodePrompt(tok)
	require.ErrorContains(t, err, "reading -messages")

	demoTok, err := demo.Tokenizer()
	require.NoError(t, err)
	write(`[{"role": "user", "content": "Hi"}]`)
	_, err = encodePrompt(demoTok)
	require.ErrorContains(t, err, "needs a checkpoint whose tokenizer_config.json has a chat template")

	given := flag.NewFlagSet("generate", flag.ContinueOnError)
	given.String("prompt", "", "")
	given.String("system", "", "")
	given.Bool("raw", false, "")
	given.Int("max-tokens", 0, "")
	require.NoError(t, given.Parse([]string{"-max-tokens", "8"}))
	require.NoError(t, conflictsWithMessages(given.Visit))
	require.NoError(t, given.Parse([]string{"-prompt", "Hi", "-raw"}))
	require.EqualError(t, conflictsWithMessages(given.Visit), "-messages holds the whole conversation: drop -prompt and -raw")
}

// -stop names tokens as the vocabulary spells them; a name that is not one is refused.
func TestStopTokens(t *testing.T) {
	tok, err := tokenizer.LoadDir(fixtures.Dir(t, "tokenizers", "qwen3"))
	require.NoError(t, err)
	defer func(s string) { *stop = s }(*stop)
	*stop = ""
	ids, err := stopTokens(tok)
	require.NoError(t, err)
	require.Empty(t, ids)
	*stop = "<|im_end|>,<|endoftext|>"
	ids, err = stopTokens(tok)
	require.NoError(t, err)
	require.Len(t, ids, 2)
	for i, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		got, ok := tok.IDToToken(ids[i])
		require.True(t, ok)
		require.Equal(t, name, got)
	}
	*stop = "<|im_end|>,<|no such token|>"
	_, err = stopTokens(tok)
	require.EqualError(t, err, `-stop: "<|no such token|>" is not a token of this vocabulary`)
}

// Flags out of range are errors naming the flag, not replaced by the preset's values;
// 0 (and -threshold not given) keep the preset's.
func TestDecodeConfigRanges(t *testing.T) {
	defer func(b, m, r, n, k int, th, temp, p float64) {
		*blockSize, *minReveal, *readback, *maxTokens, *topK, *threshold, *temperature, *topP = b, m, r, n, k, th, temp, p
	}(*blockSize, *minReveal, *readback, *maxTokens, *topK, *threshold, *temperature, *topP)
	for _, c := range []struct {
		set  func()
		want string
	}{
		{func() { *blockSize = -3 }, "-block -3: want 1 to 128"},
		{func() { *blockSize = 1000 }, "-block 1000: want 1 to 128"},
		{func() { *minReveal = -1 }, "-min-reveal -1"},
		{func() { *readback = -64 }, "-blocks-per-readback -64"},
		{func() { *threshold = -0.5 }, "-threshold -0.5: want a value in [0, 1]"},
		{func() { *threshold = -1 }, "-threshold -1"},
		{func() { *threshold = 1.5 }, "-threshold 1.5"},
		{func() { *threshold = math.NaN() }, "-threshold NaN"},
		{func() { *maxTokens = 0 }, "-max-tokens 0"},
		{func() { *temperature = -1 }, "-temperature -1"},
		{func() { *topK = -2 }, "-top-k -2"},
		{func() { *topP = 2 }, "-top-p 2"},
	} {
		*blockSize, *minReveal, *readback, *maxTokens, *topK, *threshold, *temperature, *topP = 0, 0, 0, 16, 0, 0, 0, 1
		c.set()
		_, err := decodeConfigGiven(map[string]bool{"threshold": true})
		require.ErrorContains(t, err, c.want)
	}
	*blockSize, *minReveal, *readback, *maxTokens, *topK, *threshold, *temperature, *topP = 8, 0, 0, 16, 0, 0.3, 0, 1
	cfg, err := decodeConfigGiven(map[string]bool{})
	require.NoError(t, err)
	require.Equal(t, 8, cfg.BlockSize)
	require.Equal(t, 0.9, cfg.Threshold, "-threshold not given: the preset's")
	cfg, err = decodeConfigGiven(map[string]bool{"threshold": true})
	require.NoError(t, err)
	require.Equal(t, 0.3, cfg.Threshold)
}
