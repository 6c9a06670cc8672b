package quant

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// Quantized fixture models saved as compressed-tensors checkpoints load back, through
// quant.Load and through a plain model.Load with Options, to identical logits; the
// saved folder has the compressed-tensors layout.
func TestSaveRoundTrip(t *testing.T) {
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cases := fixtures.LogitCases(t, dir)
			cal := calibrateFixture(t, loadDense(t, dir))
			for _, opts := range []Options{
				{Calibration: cal},
				{Strategy: StrategyTensor, Calibration: cal},
				{},
				{Calibration: cal, QuantizeHead: true},
			} {
				m := loadFP8(t, dir, opts)
				want := allLogits(t, m, cases)
				out := t.TempDir()
				require.NoError(t, Save(m, out, SaveOptions{SourceConfig: dir}))

				fp8, err := IsFP8Checkpoint(out)
				require.NoError(t, err)
				assert.True(t, fp8)
				checkSavedLayout(t, out, m, opts)

				plain, err := model.Load(testBackend(t), out, model.LoadOptions{DType: dtypes.Float32, Linear: Options{}})
				require.NoError(t, err, "plain model.Load with quant.Options")
				assert.Equal(t, want, allLogits(t, plain, cases), "strategy %q: logits after model.Load", opts.Strategy)
				require.NoError(t, plain.Close())

				again := loadFP8(t, out, Options{})
				assert.Equal(t, want, allLogits(t, again, cases), "strategy %q: logits after quant.Load", opts.Strategy)
				for _, m := range []*model.Model{m, again} {
					require.NoError(t, m.Close())
				}
			}
		})
	}
}

// checkSavedLayout checks the saved tensors of the first decoder layer and the head.
func checkSavedLayout(t *testing.T, dir string, m *model.Model, opts Options) {
	t.Helper()
	ckpt, err := safetensors.OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ckpt.Close()
	cfg := m.Config
	perChannel := opts.Strategy.orDefault() == StrategyChannel
	for _, part := range []struct {
		name string
		out  int
	}{
		{"q_proj", cfg.NumHeads * cfg.HeadDim}, {"k_proj", cfg.NumKVHeads * cfg.HeadDim}, {"v_proj", cfg.NumKVHeads * cfg.HeadDim},
	} {
		name := "model.layers.0.self_attn." + part.name
		info, ok := ckpt.Lookup(name + ".weight")
		require.True(t, ok, name)
		assert.Equal(t, safetensors.F8E4M3, info.DType)
		assert.Equal(t, []int{part.out, cfg.HiddenSize}, info.Shape)
		scale, ok := ckpt.Lookup(name + ".weight_scale")
		require.True(t, ok)
		assert.Equal(t, safetensors.F32, scale.DType)
		if perChannel {
			assert.Equal(t, []int{part.out, 1}, scale.Shape)
		} else {
			assert.Equal(t, []int{1}, scale.Shape)
		}
		input, ok := ckpt.Lookup(name + ".input_scale")
		assert.Equal(t, opts.Calibration != nil, ok)
		if ok {
			assert.Equal(t, []int{1}, input.Shape)
		}
	}
	embed, ok := ckpt.Lookup("model.embed_tokens.weight")
	require.True(t, ok)
	assert.Equal(t, safetensors.BF16, embed.DType)
	// Loading never quantizes a tied head (no loader sees it): only QuantizeModel does.
	head, ok := ckpt.Lookup("lm_head.weight")
	headFP8 := opts.QuantizeHead && !cfg.TieWordEmbeddings
	assert.Equal(t, !cfg.TieWordEmbeddings, ok)
	if ok {
		want := safetensors.BF16
		if headFP8 {
			want = safetensors.F8E4M3
		}
		assert.Equal(t, want, head.DType)
	}
	qc, err := ReadQuantizationConfig(dir)
	require.NoError(t, err)
	require.Len(t, qc.ConfigGroups, 1)
	group := qc.ConfigGroups["group_0"]
	assert.Equal(t, []string{"Linear"}, group.Targets)
	assert.Equal(t, opts.Strategy.orDefault(), group.Weights.Strategy)
	assert.Equal(t, opts.Calibration != nil, group.InputActivations != nil)
	if headFP8 || cfg.TieWordEmbeddings {
		assert.Empty(t, qc.Ignore)
	} else {
		assert.Equal(t, []string{HeadName}, qc.Ignore)
	}
}

// QuantizeModel on a dense model gives exactly what loading with the same options does.
func TestQuantizeModelMatchesLoad(t *testing.T) {
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cases := fixtures.LogitCases(t, dir)
			cal := calibrateFixture(t, loadDense(t, dir))
			for _, opts := range []Options{{Calibration: cal}, {Strategy: StrategyTensor}} {
				loaded := loadFP8(t, dir, opts)
				want := allLogits(t, loaded, cases)
				dense := loadDense(t, dir)
				require.NoError(t, QuantizeModel(dense, opts))
				assert.Equal(t, want, allLogits(t, dense, cases))
				bits := opts
				bits.Decoder = DecoderBits
				withBits := loadFP8(t, dir, bits)
				assert.Equal(t, want, allLogits(t, withBits, cases), "bit-operation decoder")
			}
		})
	}
}

// Random models (tied and untied, heads quantized or not) quantized with QuantizeModel
// save without a source config and load back to identical logits (dense tensors saved
// in float32, since random float32 weights are not bfloat16 values).
func TestQuantizeRandomModelSave(t *testing.T) {
	for _, tied := range []bool{false, true} {
		for _, head := range []bool{false, true} {
			cfg := tinyConfig()
			cfg.TieWordEmbeddings = tied
			m, err := model.NewRandom(testBackend(t), cfg, dtypes.Float32, 5)
			require.NoError(t, err)
			defer m.Close()
			seqs, err := RandomSequences(4, 16, cfg.VocabSize, 3)
			require.NoError(t, err)
			cal, err := Calibrate(m, seqs, CalibrateOptions{})
			require.NoError(t, err)
			require.NoError(t, QuantizeModel(m, Options{Calibration: cal, QuantizeHead: head}))
			_, isFP8 := modelcore.Of(m).Head.(*FP8Linear)
			assert.Equal(t, head, isFP8)
			tokens := []int{1, 5, 9, 13, 2, 7, 30, 31}
			want, err := m.Logits(tokens, 4)
			require.NoError(t, err)

			dir := t.TempDir()
			require.NoError(t, Save(m, dir, SaveOptions{DenseDType: safetensors.F32}))
			loaded, err := model.LoadConfig(dir)
			require.NoError(t, err)
			wantCfg := cfg
			wantCfg.TieWordEmbeddings = tied && !head // A quantized tied head is saved untied.
			assert.Equal(t, wantCfg, loaded)
			again := loadFP8(t, dir, Options{})
			got, err := again.Logits(tokens, 4)
			require.NoError(t, err)
			assert.Equal(t, want, got, "tied=%v head=%v", tied, head)
		}
	}
}

// tinyConfig is a small Llama-shaped configuration for tests that need no fixture.
func tinyConfig() model.Config {
	return model.Config{
		Architecture: model.ArchLlama, VocabSize: 48, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 32,
		BOSTokenID: 1, MaskTokenID: 47, EOSTokenIDs: []int{2},
	}
}

func TestSaveErrors(t *testing.T) {
	m, err := model.NewRandom(testBackend(t), tinyConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	defer m.Close()
	err = Save(m, t.TempDir(), SaveOptions{})
	require.ErrorContains(t, err, "no FP8 layers")
	require.NoError(t, QuantizeModel(m, Options{}))
	err = Save(m, t.TempDir(), SaveOptions{DenseDType: safetensors.I32})
	require.ErrorContains(t, err, "unsupported dense dtype")
	err = Save(m, t.TempDir(), SaveOptions{SourceConfig: filepath.Join(t.TempDir(), "absent.json")})
	require.ErrorContains(t, err, "reading the source config")
	for _, dir := range fixtures.Subdirs(t, "models") {
		err = Save(m, t.TempDir(), SaveOptions{SourceConfig: dir})
		require.ErrorContains(t, err, "describes another model")
		break
	}
	bad := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(bad, []byte("{"), 0o644))
	require.Error(t, Save(m, t.TempDir(), SaveOptions{SourceConfig: bad}))
}

// TestSaveShards checks that a sharded FP8 checkpoint loads to the same logits as the
// model saved.
func TestSaveShards(t *testing.T) {
	dir := fixtures.Subdirs(t, "models")[0]
	cases := fixtures.LogitCases(t, dir)
	m := loadFP8(t, dir, Options{})
	defer m.Close()
	want := allLogits(t, m, cases)
	out := t.TempDir()
	require.NoError(t, Save(m, out, SaveOptions{SourceConfig: dir, ShardBytes: 48 << 10}))
	shards, err := filepath.Glob(filepath.Join(out, "model-*-of-*.safetensors"))
	require.NoError(t, err)
	require.Greater(t, len(shards), 1, "several shards")
	for _, s := range shards {
		info, err := os.Stat(s)
		require.NoError(t, err)
		require.LessOrEqual(t, info.Size(), int64(48<<10), s)
	}
	again := loadFP8(t, out, Options{})
	defer again.Close()
	assert.Equal(t, want, allLogits(t, again, cases))
}
