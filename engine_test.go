package blockdiff

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// corpus trains the test checkpoints' tokenizer.
var corpus = []string{
	"func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
	"package main\n\nimport \"fmt\"\n",
	"for i := 0; i < n; i++ {\n\tsum += i\n}\n",
	"if err != nil {\n\treturn err\n}\n",
}

// testPresets differ from the built-in ones, so that a test can tell which were read.
var testPresets = diffusion.Presets{
	"quality": {BlockSize: 4, Threshold: 0.8, MinReveal: 1},
	"speed":   {BlockSize: 8, Threshold: 0.5, MinReveal: 2},
}

// checkpoint is a folder holding a tiny random-weight model (FP8 when fp8 is set), the
// tokenizer trained on corpus and testPresets, as a user's checkpoint folder would.
// eos is the config.json EOS token: the tokenizer's when negative.
func checkpoint(t *testing.T, b compute.Backend, fp8 bool, eos int) string {
	t.Helper()
	dir := t.TempDir()
	trained, err := tokenizer.Train(context.Background(), slices.Values(corpus), tokenizer.TrainConfig{VocabSize: 300})
	require.NoError(t, err)
	require.NoError(t, trained.WriteDir(dir))
	vocab := trained.VocabSize() // BOS, EOS, pad and mask are its last four ids
	if eos < 0 {
		eos = vocab - 3
	}
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: vocab, HiddenSize: 64, IntermediateSize: 128,
		NumLayers: 2, NumHeads: 2, NumKVHeads: 1, HeadDim: 32, MaxPositionEmbeddings: 1024,
		RMSNormEps: 1e-6, RopeTheta: 1e4, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 64,
		BOSTokenID: vocab - 4, EOSTokenIDs: []int{eos}, MaskTokenID: vocab - 1,
	}
	m, err := model.NewRandom(b, cfg, model.DefaultDType(b), 7)
	require.NoError(t, err)
	defer m.Close()
	if fp8 {
		require.NoError(t, quant.QuantizeModel(m, quant.Options{}))
		require.NoError(t, quant.Save(m, dir, quant.SaveOptions{}))
	} else {
		require.NoError(t, m.Save(dir, model.SaveOptions{}))
	}
	require.NoError(t, diffusion.WritePresets(dir, testPresets))
	return dir
}

// reference decodes ids as the lower-level packages do, on the model the engine loaded.
func reference(t *testing.T, e *Engine, ids []int) *diffusion.Result {
	t.Helper()
	dec, err := diffusion.New(e.Model(), e.Config())
	require.NoError(t, err)
	res, err := dec.Generate(context.Background(), ids)
	require.NoError(t, err)
	return res
}

func drain(t *testing.T, stream func(yield func(string, error) bool)) string {
	t.Helper()
	var text strings.Builder
	for piece, err := range stream {
		require.NoError(t, err)
		require.NotEmpty(t, piece, "a stream yields no empty pieces")
		text.WriteString(piece)
	}
	return text.String()
}

// Load reads the folder's presets and applies the options; Generate and Stream decode
// the plain-text prompt as the decoder does, and the stream's text is Generate's.
func TestLoadGenerateStream(t *testing.T) {
	b := testutil.Backend(t)
	dir := checkpoint(t, b, false, -1)
	ctx := context.Background()

	e, err := Load(ctx, dir, Options{Backend: b, MaxNewTokens: 12})
	require.NoError(t, err)
	defer e.Close()
	cfg := e.Config()
	require.Equal(t, 0.8, cfg.Threshold, "the folder's quality preset")
	require.Equal(t, 12, cfg.MaxNewTokens)
	require.Equal(t, diffusion.Fused, cfg.Mode)
	_, isFP8 := modelcore.Of(e.Model()).Layers[0].QKV.(*quant.FP8Linear)
	require.False(t, isFP8, "a float checkpoint loads dense")

	const prompt = "func main() {"
	res, err := e.Generate(ctx, prompt)
	require.NoError(t, err)
	ids, err := e.Tokenizer().Encode(prompt)
	require.NoError(t, err)
	want := reference(t, e, ids)
	require.Equal(t, want.Tokens, res.Tokens)
	require.Equal(t, want.Stats.Forwards, res.Stats.Forwards)
	require.LessOrEqual(t, len(res.Tokens), 12)
	require.NotEmpty(t, res.Tokens, "the comparisons below need some output")
	require.Equal(t, e.Tokenizer().Decode(want.Tokens, true), res.Text)
	require.Equal(t, res.Text, drain(t, e.Stream(ctx, prompt)))

	// Breaking out of a stream stops it; the engine generates again afterwards.
	for range e.Stream(ctx, prompt) {
		break
	}
	again, err := e.Generate(ctx, prompt)
	require.NoError(t, err)
	require.Equal(t, res.Tokens, again.Tokens)
}

// Options pick the preset, the mode and the rest of the decoder's configuration.
func TestLoadOptions(t *testing.T) {
	b := testutil.Backend(t)
	dir := checkpoint(t, b, false, -1)
	ctx := context.Background()

	e, err := Load(ctx, dir, Options{Backend: b, Preset: "speed", Mode: diffusion.Reference,
		Configure: func(c *diffusion.Config) { c.Temperature, c.Seed = 0.7, 3 }})
	require.NoError(t, err)
	defer e.Close()
	cfg := e.Config()
	require.Equal(t, 8, cfg.BlockSize)
	require.Equal(t, 0.5, cfg.Threshold)
	require.Equal(t, 2, cfg.MinReveal)
	require.Equal(t, diffusion.Reference, cfg.Mode)
	require.Equal(t, 0.7, cfg.Temperature)
	require.Equal(t, diffusion.DefaultConfig().MaxNewTokens, cfg.MaxNewTokens)
	res, err := e.Generate(ctx, "if err")
	require.NoError(t, err)
	ids, err := e.Tokenizer().Encode("if err")
	require.NoError(t, err)
	require.Equal(t, reference(t, e, ids).Tokens, res.Tokens, "sampling with a seed repeats")

	_, err = Load(ctx, dir, Options{Backend: b, Preset: "fastest"})
	require.ErrorContains(t, err, `"fastest"`)
	_, err = Load(ctx, dir, Options{Backend: b, MaxNewTokens: -1})
	require.ErrorContains(t, err, "max new tokens")
	_, err = Load(ctx, dir, Options{Backend: b, Configure: func(c *diffusion.Config) { c.Threshold = 2 }})
	require.Error(t, err)
}

// Generation stops at the tokenizer's EOS token even when config.json names another.
func TestTokenizerEOSStops(t *testing.T) {
	b := testutil.Backend(t)
	dir := checkpoint(t, b, false, 0)
	e, err := Load(context.Background(), dir, Options{Backend: b})
	require.NoError(t, err)
	defer e.Close()
	eos, ok := e.Tokenizer().EOSTokenID()
	require.True(t, ok)
	require.NotEqual(t, []int{eos}, e.Model().Config.EOSTokenIDs)
	require.Contains(t, e.Config().StopTokens, eos)
}

// Chat renders the conversation with the chat template; without one it is a clear
// error, and contents that spell a special token are refused.
func TestChat(t *testing.T) {
	b := testutil.Backend(t)
	dir := checkpoint(t, b, false, -1)
	ctx := context.Background()
	msgs := []tokenizer.Message{{Role: "user", Content: "print hello"}}

	e, err := Load(ctx, dir, Options{Backend: b, MaxNewTokens: 8})
	require.NoError(t, err)
	_, err = e.Chat(ctx, msgs)
	require.ErrorIs(t, err, tokenizer.ErrNoChatTemplate)
	for _, err := range e.ChatStream(ctx, msgs) {
		require.ErrorIs(t, err, tokenizer.ErrNoChatTemplate)
	}
	require.NoError(t, e.Close())

	template := "{% for m in messages %}<|bos|>{{ m.role }}: {{ m.content }}\n{% endfor %}" +
		"{% if add_generation_prompt %}<|bos|>assistant: {% endif %}"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(template), 0o644))
	e, err = Load(ctx, dir, Options{Backend: b, MaxNewTokens: 8})
	require.NoError(t, err)
	defer e.Close()
	res, err := e.Chat(ctx, msgs)
	require.NoError(t, err)
	ids, err := e.Tokenizer().EncodeChat(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	bos, _ := e.Tokenizer().BOSTokenID()
	require.Equal(t, 2, strings.Count(e.Tokenizer().Decode(ids, false), "<|bos|>"), "the template's special tokens are real")
	require.Equal(t, bos, ids[0])
	require.Equal(t, reference(t, e, ids).Tokens, res.Tokens)
	require.Equal(t, res.Text, drain(t, e.ChatStream(ctx, msgs)))

	_, err = e.Chat(ctx, []tokenizer.Message{{Role: "user", Content: "hi<|eos|>"}})
	require.ErrorContains(t, err, "special token")
	_, err = e.Chat(ctx, nil)
	require.Error(t, err)
}

// An FP8 checkpoint loads in FP8 by itself; Options.FP8 quantizes a float one.
func TestLoadFP8(t *testing.T) {
	b := testutil.Backend(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		stored    bool
		quantized bool
	}{{"fp8 checkpoint", true, false}, {"quantized at load", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := checkpoint(t, b, tc.stored, -1)
			isFP8, err := quant.IsFP8Checkpoint(dir)
			require.NoError(t, err)
			require.Equal(t, tc.stored, isFP8)
			e, err := Load(ctx, dir, Options{Backend: b, FP8: tc.quantized, MaxNewTokens: 8})
			require.NoError(t, err)
			defer e.Close()
			for _, l := range modelcore.Of(e.Model()).Layers {
				for _, lin := range []modelcore.Linear{l.QKV, l.O, l.GateUp, l.Down} {
					require.IsType(t, &quant.FP8Linear{}, lin)
				}
			}
			res, err := e.Generate(ctx, "package main")
			require.NoError(t, err)
			require.LessOrEqual(t, len(res.Tokens), 8)
		})
	}
}

// A folder that cannot run fails before its weights load, naming what is wrong; a
// closed engine refuses to generate.
func TestLoadErrorsAndClose(t *testing.T) {
	b := testutil.Backend(t)
	ctx := context.Background()
	_, err := Load(ctx, t.TempDir(), Options{Backend: b})
	require.ErrorContains(t, err, "tokenizer.json")

	dir := checkpoint(t, b, false, -1)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Load(cancelled, dir, Options{Backend: b})
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, os.WriteFile(filepath.Join(dir, diffusion.GenerationConfigFile),
		[]byte(`{"block_diffusion": {"presets": {"quality": {"block_size": 4, "threshold": 0.9, "min_reveal": 1}}}}`), 0o644))
	_, err = Load(ctx, dir, Options{Backend: b})
	require.ErrorContains(t, err, "speed")

	dir = checkpoint(t, b, false, -1)
	e, err := Load(ctx, dir, Options{Backend: b, MaxNewTokens: 4})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "closing again does nothing")
	_, err = e.Generate(ctx, "x")
	require.ErrorIs(t, err, model.ErrClosed)
}

// Without Options.Backend, Load creates the backend backend.New picks and Close
// releases it. Skipped on XLA, where a second client would not fit on the device.
func TestLoadOwnBackend(t *testing.T) {
	if backend.Select().IsXLA() {
		t.Skip("the tests' XLA client holds the device")
	}
	b := testutil.Backend(t)
	dir := checkpoint(t, b, false, -1)
	e, err := Load(context.Background(), dir, Options{MaxNewTokens: 4})
	require.NoError(t, err)
	require.NotSame(t, b, modelcore.Of(e.Model()).Backend())
	res, err := e.Generate(context.Background(), "for i")
	require.NoError(t, err)
	require.LessOrEqual(t, len(res.Tokens), 4)
	require.NoError(t, e.Close())
	_, err = e.Generate(context.Background(), "x")
	require.ErrorIs(t, err, model.ErrClosed)
}
