package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff"
	"github.com/blockdiff/blockdiff/demomodel"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/quant"
)

// The engine on the demo checkpoint: FP8 from its config.json, the presets of its
// generation_config.json, its tokenizer; the stream's text is Generate's.
func TestDemoEngine(t *testing.T) {
	dir, err := demomodel.Dir()
	require.NoError(t, err)
	ctx := context.Background()
	engine, err := blockdiff.Load(ctx, dir, blockdiff.Options{Backend: testutil.Backend(t), MaxNewTokens: 24})
	require.NoError(t, err)
	defer engine.Close()

	require.IsType(t, &quant.FP8Linear{}, modelcore.Of(engine.Model()).Layers[0].QKV)
	presets, err := diffusion.LoadPresets(dir)
	require.NoError(t, err)
	quality, err := presets.Config("quality")
	require.NoError(t, err)
	builtin, err := diffusion.BuiltinPresets().Config("quality")
	require.NoError(t, err)
	require.NotEqual(t, builtin.Threshold, quality.Threshold, "the demo's preset must differ from the built-in one for this check")
	require.Equal(t, quality.Threshold, engine.Config().Threshold, "the demo's quality preset")
	res, err := engine.Generate(ctx, demomodel.Prompt)
	require.NoError(t, err)
	require.NotEmpty(t, res.Tokens)
	var streamed strings.Builder
	for piece, err := range engine.Stream(ctx, demomodel.Prompt) {
		require.NoError(t, err)
		streamed.WriteString(piece)
	}
	require.Equal(t, res.Text, streamed.String())
	t.Logf("%q", res.Text)
}
