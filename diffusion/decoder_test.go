package diffusion

import (
	"context"
	"errors"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

func tinyModel(t *testing.T) *model.Model {
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: 64, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 512,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 32,
		MaskTokenID: 63, EOSTokenIDs: []int{2},
	}
	m, err := model.NewRandom(testutil.Backend(t), cfg, dtypes.Float32, 3)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestSmoke(t *testing.T) {
	m := tinyModel(t)
	for _, mode := range []Mode{Reference, Fused, Autoregressive} {
		cfg := Quality
		cfg.Mode = mode
		cfg.MaxNewTokens = 12
		cfg.Trace = true
		d, err := New(m, cfg)
		require.NoError(t, err)
		res, err := d.Generate(context.Background(), []int{5, 6, 7})
		if err != nil {
			t.Fatalf("%+v", errors.Unwrap(err))
		}
		t.Logf("%s: %v %s %+v steps=%v", mode, res.Tokens, res.Finish, res.Stats, res.Steps)
	}
}
