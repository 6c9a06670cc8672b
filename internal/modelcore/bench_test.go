package modelcore

import (
	"fmt"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// benchConfig is a mid-sized model for CPU benchmarks: large enough for matrix work to
// dominate, small enough for a laptop.
func benchConfig() Config {
	cfg := MiniCPM5_2B
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers = 512, 1536, 4
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.VocabSize, cfg.MaskTokenID = 8, 2, 64, 8192, 8191
	return cfg
}

// BenchmarkSession times the host-driven passes the decoder runs, against a cache of
// 512 positions: a 4-token denoise step, a 4-token commit and a 1-token causal step.
func BenchmarkSession(b *testing.B) {
	m, err := NewRandom(testutil.Backend(b), benchConfig(), dtypes.Float32, 1)
	require.NoError(b, err)
	defer m.Close()
	prompt := make([]int, 512)
	for i := range prompt {
		prompt[i] = i % m.Config.VocabSize
	}
	for _, c := range []struct {
		name   string
		tokens int
		block  int
		commit bool
	}{{"step4", 4, 4, false}, {"commit4", 4, 4, true}, {"ar1", 1, 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := m.NewSession(1024, c.block)
			require.NoError(b, err)
			defer s.Close()
			_, err = s.Prefill(prompt)
			require.NoError(b, err)
			tokens := prompt[:c.tokens]
			for b.Loop() {
				if c.commit && s.Len()+c.tokens > 1024 {
					b.StopTimer()
					s.Close()
					s, _ = m.NewSession(1024, c.block)
					_, _ = s.Prefill(prompt)
					b.StartTimer()
				}
				if c.commit {
					_, err = s.Commit(tokens)
				} else {
					_, err = s.Step(tokens)
				}
				require.NoError(b, err)
			}
		})
	}
}

// BenchmarkPrefill times writing a prompt's blocks into the cache.
func BenchmarkPrefill(b *testing.B) {
	m, err := NewRandom(testutil.Backend(b), benchConfig(), dtypes.Float32, 1)
	require.NoError(b, err)
	defer m.Close()
	for _, n := range []int{128, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			prompt := make([]int, n)
			for i := range prompt {
				prompt[i] = (i * 31) % m.Config.VocabSize
			}
			for b.Loop() {
				s, err := m.NewSession(n, 4)
				require.NoError(b, err)
				_, err = s.Prefill(prompt)
				require.NoError(b, err)
				s.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
