package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// tinyConfig is a small MiniCPM-style configuration for tests that need no checkpoint.
func tinyConfig() Config {
	return Config{
		Architecture: ArchMiniCPM, VocabSize: 64, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1,
		ScaleEmb: 12, ScaleDepth: 1.4, DimModelBase: 16, MaskTokenID: 63, EOSTokenIDs: []int{2},
	}
}

// maxRelDiff is max |a-b| / max |b| over two logit matrices.
func maxRelDiff(t *testing.T, got, want [][]float32) float64 {
	t.Helper()
	require.Equal(t, len(want), len(got), "rows")
	var diff, scale float64
	for i := range want {
		require.Equal(t, len(want[i]), len(got[i]), "row %d", i)
		for j := range want[i] {
			diff = math.Max(diff, math.Abs(float64(got[i][j]-want[i][j])))
			scale = math.Max(scale, math.Abs(float64(want[i][j])))
		}
	}
	return diff / scale
}

// The cached path (prefill of the prompt's full blocks, then a step and a commit per
// block) must give the logits of one block-causal forward of the whole sequence.
func TestCachedPathMatchesFullForward(t *testing.T) {
	m, err := NewRandom(testutil.Backend(t), tinyConfig(), dtypes.Float32, 7)
	require.NoError(t, err)
	defer m.Close()
	const block = 4
	seq := make([]int, 22)
	for i := range seq {
		seq[i] = (i*37 + 5) % m.Config.VocabSize
	}
	for promptLen := 1; promptLen <= 8; promptLen++ {
		t.Run(fmt.Sprintf("prompt%d", promptLen), func(t *testing.T) {
			full, err := m.Logits(seq, block)
			require.NoError(t, err)
			s, err := m.NewSession(32, block)
			require.NoError(t, err)
			defer s.Close()

			got := make([][]float32, len(seq))
			cached := promptLen / block * block
			if cached > 0 {
				last, err := s.Prefill(seq[:cached])
				require.NoError(t, err)
				got[cached-1] = last
			}
			for start := cached; start < len(seq); start += block {
				end := min(start+block, len(seq))
				step, err := s.Step(seq[start:end])
				require.NoError(t, err)
				if end-start < block {
					copy(got[start:end], step)
					break
				}
				commit, err := s.Commit(seq[start:end])
				require.NoError(t, err)
				require.Less(t, maxRelDiff(t, step, commit), 1e-6, "a step and a commit of the same block differ")
				copy(got[start:end], commit)
			}
			from := max(cached-1, 0)
			require.Less(t, maxRelDiff(t, got[from:], full[from:]), 1e-5)
		})
	}
}
