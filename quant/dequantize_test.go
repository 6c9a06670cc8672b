package quant

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// Dequantizing a weight-only FP8 model gives dense layers whose products are the FP8
// layers' (the same exact weight values), and a model that can be trained.
func TestDequantize(t *testing.T) {
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: 64, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeAttentionFactor: 1, TieWordEmbeddings: true,
		ScaleEmb: 1, DimModelBase: 32, BOSTokenID: 1, EOSTokenIDs: []int{2}, MaskTokenID: 63,
	}
	m, err := model.NewRandom(testBackend(t), cfg, dtypes.Float32, 4)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, QuantizeModel(m, Options{}))
	_, err = modelcore.Of(m).TrainableParams()
	require.Error(t, err, "FP8 layers cannot be trained")
	tokens := []int{1, 5, 9, 13, 17, 21, 25, 29}
	want, err := m.Logits(tokens, 4)
	require.NoError(t, err)
	require.NoError(t, Dequantize(m))
	_, err = modelcore.Of(m).TrainableParams()
	require.NoError(t, err)
	got, err := m.Logits(tokens, 4)
	require.NoError(t, err)
	for i := range want {
		require.InDeltaSlice(t, want[i], got[i], 1e-4, "row %d", i)
	}
}
