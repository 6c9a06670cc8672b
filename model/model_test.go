package model

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/testutil"
)

// The package's tests are those of its implementation, package internal/modelcore;
// these check what this package adds: the public names and the wrapping.

func tinyConfig() Config {
	return Config{
		Architecture: ArchMiniCPM, VocabSize: 64, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1,
		ScaleEmb: 12, ScaleDepth: 1.4, DimModelBase: 16, MaskTokenID: 63, EOSTokenIDs: []int{2},
	}
}

// The constants and the MiniCPM5-2B shape written out here are the implementation's.
func TestPublicNamesMatchTheImplementation(t *testing.T) {
	require.Equal(t, modelcore.ArchMiniCPM, ArchMiniCPM)
	require.Equal(t, modelcore.ArchLlama, ArchLlama)
	require.Equal(t, []int{modelcore.MaxWidth, modelcore.MaxVocabSize, modelcore.MaxLayers, modelcore.MaxHeads,
		modelcore.MaxPositions, modelcore.MaxConfigSize},
		[]int{MaxWidth, MaxVocabSize, MaxLayers, MaxHeads, MaxPositions, MaxConfigSize})
	require.Equal(t, modelcore.MiniCPM5_2B, MiniCPM5_2B.core())
	require.ErrorIs(t, ErrClosed, modelcore.ErrClosed)
}

// A Config converts to the implementation's and back unchanged, sharing no memory.
func TestConfigConversion(t *testing.T) {
	cfg := tinyConfig()
	cfg.RopeFactors = []float64{1, 2, 3, 4}
	core := cfg.core()
	require.Equal(t, cfg, publicConfig(core))
	core.EOSTokenIDs[0], core.RopeFactors[0] = 7, 7
	require.Equal(t, tinyConfig().EOSTokenIDs, cfg.EOSTokenIDs)
	require.Equal(t, 1.0, cfg.RopeFactors[0])
	require.Nil(t, tinyConfig().core().RopeFactors, "nil stays nil (JSON writes no rope_scaling)")

	bad := cfg
	bad.NumKVHeads = 3
	require.ErrorContains(t, bad.Validate(), "num_key_value_heads")
	data, err := cfg.JSON()
	require.NoError(t, err)
	back, err := ParseConfig(data)
	require.NoError(t, err)
	require.Equal(t, cfg, back)
	_, err = LoadConfig(t.TempDir())
	require.ErrorContains(t, err, "config.json")
}

// Model's methods are its implementation's, which modelcore.Of returns.
func TestModelWrapsItsImplementation(t *testing.T) {
	b := testutil.Backend(t)
	m, err := NewRandom(b, tinyConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	require.Equal(t, tinyConfig(), m.Config)
	require.Equal(t, dtypes.Float32, m.DType)
	core := modelcore.Of(m)
	require.Same(t, m.core, core)
	require.Equal(t, core.WeightBytes(), m.WeightBytes())
	require.Equal(t, core.CacheBytes(2, 16), m.CacheBytes(2, 16))

	tokens := []int{1, 5, 9, 13, 17, 21, 25, 29}
	want, err := core.Logits(tokens, 4)
	require.NoError(t, err)
	got, err := m.Logits(tokens, 4)
	require.NoError(t, err)
	require.Equal(t, want, got)

	s, err := m.NewSession(16, 4)
	require.NoError(t, err)
	last, err := s.Prefill(tokens[:4])
	require.NoError(t, err)
	require.InDeltaSlice(t, want[3], last, 1e-4)
	step, err := s.Step(tokens[4:])
	require.NoError(t, err)
	require.Len(t, step, 4)
	require.Equal(t, 4, s.Len(), "a step writes nothing")
	_, err = s.Commit(tokens[4:])
	require.NoError(t, err)
	require.Equal(t, 8, s.Len())
	s.Close()

	dir := t.TempDir()
	require.NoError(t, m.Save(dir, SaveOptions{DType: dtypes.Float32}))
	loaded, err := Load(b, dir, LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	require.Equal(t, m.Config, loaded.Config)
	again, err := loaded.Logits(tokens, 4)
	require.NoError(t, err)
	require.Equal(t, want, again)
	require.NoError(t, loaded.Close())

	require.NoError(t, m.Close())
	_, err = m.Logits(tokens, 4)
	require.ErrorIs(t, err, ErrClosed)
	_, err = m.NewSession(16, 4)
	require.ErrorIs(t, err, ErrClosed)
}

// Models not made by this package are errors, as in the implementation.
func TestNilAndZeroModels(t *testing.T) {
	var none *Model
	require.Nil(t, modelcore.Of(none))
	_, err := none.Logits([]int{1}, 4)
	require.ErrorContains(t, err, "nil model")
	_, err = none.NewSession(8, 4)
	require.ErrorContains(t, err, "nil model")
	require.NoError(t, none.Close())
	_, err = (&Model{Config: tinyConfig()}).Logits([]int{1}, 4)
	require.ErrorContains(t, err, "has no backend")
	_, err = NewRandom(nil, tinyConfig(), dtypes.Float32, 1)
	require.ErrorContains(t, err, "no backend")
	_, err = FromCheckpoint(testutil.Backend(t), tinyConfig(), nil, LoadOptions{})
	require.ErrorContains(t, err, "no checkpoint")
}
