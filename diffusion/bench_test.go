package diffusion

import (
	"context"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

// BenchmarkGenerate times whole generations of 64 tokens after a 64-token prompt on a
// mid-sized random model, in each mode, under the forced schedules that bound the
// tokens per forward (random weights make confidences meaningless).
func BenchmarkGenerate(b *testing.B) {
	cfg := model.MiniCPM5_2B
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers = 512, 1536, 4
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.VocabSize, cfg.MaskTokenID = 8, 2, 64, 8192, 8191
	cfg.EOSTokenIDs = nil
	m, err := model.NewRandom(testutil.Backend(b), cfg, dtypes.Float32, 1)
	require.NoError(b, err)
	defer m.Close()
	prompt := make([]int, 64)
	for i := range prompt {
		prompt[i] = (i * 37) % 8000
	}
	cases := []struct {
		name     string
		mode     Mode
		schedule Schedule
	}{
		{"fused/reveal-all", Fused, RevealAll},
		{"fused/reveal-min", Fused, RevealMin},
		{"reference/reveal-min", Reference, RevealMin},
		{"autoregressive", Autoregressive, Natural},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dc := Quality
			dc.Mode, dc.Schedule, dc.MaxNewTokens, dc.BlocksPerReadback = c.mode, c.schedule, 64, 16
			d, err := New(m, dc)
			require.NoError(b, err)
			tokens := 0
			for b.Loop() {
				res, err := d.Generate(context.Background(), prompt)
				require.NoError(b, err)
				tokens += len(res.Tokens)
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
