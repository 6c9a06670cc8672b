package modelcore

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/safetensors"
)

// hostileBase is the config.json of the checkpoints hostile tests write: a tiny Llama.
var hostileBase = map[string]any{
	"architectures": []string{ArchLlama}, "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
	"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
	"max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
	"bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 63,
}

// configJSON is hostileBase with edits (a nil value removes the field).
func configJSON(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	fields := maps.Clone(hostileBase)
	for k, v := range edits {
		if v == nil {
			delete(fields, k)
		} else {
			fields[k] = v
		}
	}
	data, err := json.Marshal(fields)
	require.NoError(t, err)
	return data
}

// writeCheckpoint writes a folder holding config.json and a model.safetensors of zero
// float32 tensors shaped as hostileBase says (not as the edited config does), so that
// the tensors contradict the edits.
func writeCheckpoint(t *testing.T, edits map[string]any) string {
	t.Helper()
	cfg, err := ParseConfig(configJSON(t, nil))
	require.NoError(t, err)
	list, err := expectedTensors(cfg)
	require.NoError(t, err)
	var w safetensors.Writer
	for _, tensor := range list {
		size, err := mulInts(append([]int{4}, tensor.dims...)...)
		require.NoError(t, err)
		require.NoError(t, w.Add(tensor.name, safetensors.F32, tensor.dims, make([]byte, size)))
	}
	dir := t.TempDir()
	require.NoError(t, w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), configJSON(t, edits), 0o644))
	return dir
}

// Numbers of config.json out of bounds, or that cannot be right, are errors naming the
// field, from ParseConfig alone.
func TestConfigBounds(t *testing.T) {
	for name, c := range map[string]struct {
		edits map[string]any
		want  string
	}{
		"huge head_dim":          {map[string]any{"head_dim": 2_000_000_000}, "head_dim 2000000000 exceeds the limit"},
		"huge intermediate_size": {map[string]any{"intermediate_size": 35184372088832}, "intermediate_size 35184372088832 exceeds the limit"},
		"huge vocab_size":        {map[string]any{"vocab_size": int64(1) << 40}, "vocab_size 1099511627776 exceeds the limit"},
		"huge layers":            {map[string]any{"num_hidden_layers": 1 << 20}, "num_hidden_layers 1048576 exceeds the limit"},
		"absurd heads":           {map[string]any{"num_attention_heads": 1 << 30, "num_key_value_heads": 1 << 30}, "num_attention_heads 1073741824 exceeds"},
		"heads overflow":         {map[string]any{"num_attention_heads": int64(1) << 62, "head_dim": int64(1) << 62}, "exceeds the limit"},
		"huge positions":         {map[string]any{"max_position_embeddings": 1 << 30}, "max_position_embeddings 1073741824 exceeds"},
		"zero kv heads":          {map[string]any{"num_key_value_heads": 0}, "num_key_value_heads must be positive"},
		"negative hidden":        {map[string]any{"hidden_size": -32}, "hidden_size must be positive"},
		"default head_dim of 0":  {map[string]any{"head_dim": nil, "num_attention_heads": 64, "num_key_value_heads": 64}, "head_dim must be positive, got 0"},
		"zero eps":               {map[string]any{"rms_norm_eps": 0}, "rms_norm_eps must be positive"},
		"negative eps":           {map[string]any{"rms_norm_eps": -1e-6}, "rms_norm_eps must be positive"},
		"zero theta":             {map[string]any{"rope_theta": 0}, "rope_theta must be positive"},
		"negative theta":         {map[string]any{"rope_theta": -10000}, "rope_theta must be positive"},
		"theta of 1":             {map[string]any{"rope_theta": 1}, "rope_theta must be above 1"},
		"bos outside":            {map[string]any{"bos_token_id": 64}, "bos_token_id 64 is outside the vocabulary of 64"},
		"negative bos":           {map[string]any{"bos_token_id": -1}, "bos_token_id -1 is outside"},
		"eos outside":            {map[string]any{"eos_token_id": []int{2, 99}}, "eos_token_id 99 is outside"},
		"negative eos":           {map[string]any{"eos_token_id": -2}, "eos_token_id -2 is outside"},
		"mask outside":           {map[string]any{"mask_token_id": 64}, "mask_token_id 64 is outside"},
		"negative mask":          {map[string]any{"mask_token_id": -3}, "mask_token_id -3 is negative"},
		"pad outside":            {map[string]any{"pad_token_id": 640}, "pad_token_id 640 is outside"},
		"negative pad":           {map[string]any{"pad_token_id": -7}, "pad_token_id -7 is outside"},
		"infinite attention factor": {map[string]any{"rope_scaling": map[string]any{"rope_type": "longrope",
			"short_factor": []float64{1, 1, 1, 1}, "long_factor": []float64{1, 1, 1, 1}, "original_max_position_embeddings": 1}},
			"attention factor must be finite"},
		"negative attention factor": {map[string]any{"rope_scaling": map[string]any{"rope_type": "longrope",
			"short_factor": []float64{1, 1, 1, 1}, "long_factor": []float64{1, 1, 1, 1}, "attention_factor": -1}},
			"attention factor must be positive"},
		"float size":      {map[string]any{"hidden_size": 32.5}, "hidden_size"},
		"number too big":  {map[string]any{"vocab_size": 1e300}, "vocab_size"},
		"theta too big":   {map[string]any{"rope_theta": json.RawMessage("1e400")}, "invalid config.json"},
		"two archs":       {map[string]any{"architectures": []string{ArchLlama, ArchLlama}}, "exactly one architecture"},
		"minicpm nan-ish": {map[string]any{"architectures": []string{ArchMiniCPM}, "scale_emb": 1, "scale_depth": 1, "dim_model_base": 0}, "dim_model_base must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig(configJSON(t, c.edits))
			require.ErrorContains(t, err, c.want)
		})
	}
	cfg, err := ParseConfig(configJSON(t, map[string]any{"pad_token_id": -1}))
	require.NoError(t, err, "pad_token_id -1 says there is none")
	require.NoError(t, cfg.Validate())

	cfg.RMSNormEps = math.NaN()
	require.ErrorContains(t, cfg.Validate(), "rms_norm_eps must be finite")
	cfg.RMSNormEps, cfg.RopeFactors = 1e-6, []float64{1, math.Inf(1), 1, 1}
	require.ErrorContains(t, cfg.Validate(), "factor[1]=+Inf must be positive and finite")
	cfg.RopeFactors, cfg.Architecture = nil, "GPT2LMHeadModel"
	require.ErrorContains(t, cfg.Validate(), `unsupported architecture "GPT2LMHeadModel"`)
}

// Loading a folder whose config.json the tensors do not confirm fails with an error
// naming the file, the tensor and the fields, before anything is sized from the config:
// in a child process whose memory is limited, where the configs that used to exhaust
// memory or panic (a head_dim of 2·10⁹, an intermediate_size of 2⁴⁵) end cleanly too.
func TestHostileCheckpoints(t *testing.T) {
	if !testutil.InChild(t, 1<<30, 5*time.Minute) {
		return
	}
	b := testutil.Backend(t)
	for name, c := range map[string]struct {
		edits map[string]any
		want  []string
	}{
		"huge head_dim":          {map[string]any{"head_dim": 2_000_000_000}, []string{"config.json", "head_dim 2000000000 exceeds"}},
		"huge intermediate_size": {map[string]any{"intermediate_size": 35184372088832}, []string{"config.json", "intermediate_size 35184372088832"}},
		"head_dim at the limit": {map[string]any{"head_dim": MaxWidth},
			[]string{`tensor "model.layers.0.self_attn.q_proj.weight" has shape [32 32], want [4194304 32] (config.json: num_attention_heads × head_dim, hidden_size)`}},
		"intermediate_size at the limit": {map[string]any{"intermediate_size": MaxWidth},
			[]string{`tensor "model.layers.0.mlp.gate_proj.weight" has shape [48 32], want [1048576 32] (config.json: intermediate_size, hidden_size)`}},
		"heads and head_dim at the limits": {map[string]any{"num_attention_heads": MaxHeads, "num_key_value_heads": MaxHeads, "head_dim": MaxWidth},
			[]string{`q_proj.weight" has shape [32 32], want [4294967296 32]`}},
		"vocab_size at the limit": {map[string]any{"vocab_size": MaxVocabSize},
			[]string{`tensor "model.embed_tokens.weight" has shape [64 32], want [16777216 32] (config.json: vocab_size, hidden_size)`}},
		"hidden_size at the limit": {map[string]any{"hidden_size": MaxWidth, "head_dim": 8}, []string{`embed_tokens.weight" has shape [64 32], want [64 1048576]`}},
		"more layers":              {map[string]any{"num_hidden_layers": MaxLayers}, []string{`missing tensor "model.layers.2.input_layernorm.weight" (config.json: num_hidden_layers 4096`}},
		"fewer layers":             {map[string]any{"num_hidden_layers": 1}, []string{"unexpected tensor(s) in the checkpoint", "model.layers.1."}},
		"more kv heads":            {map[string]any{"num_key_value_heads": 4}, []string{`k_proj.weight" has shape [16 32], want [32 32] (config.json: num_key_value_heads × head_dim, hidden_size)`}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeCheckpoint(t, c.edits)
			m, err := Load(b, dir, LoadOptions{DType: dtypes.Float32})
			require.Nil(t, m)
			for _, want := range c.want {
				require.ErrorContains(t, err, want)
			}
			require.ErrorContains(t, err, dir)
		})
	}
	m, err := Load(b, writeCheckpoint(t, nil), LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err, "the checkpoint as written loads")
	require.NoError(t, m.Close())
}

// Tensors of a dtype that is not a float, or whose shape has a zero, are errors naming
// them.
func TestCheckpointDTypes(t *testing.T) {
	b := testutil.Backend(t)
	dir := writeCheckpoint(t, nil)
	ckpt, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFileName))
	require.NoError(t, err)
	var w safetensors.Writer
	for _, info := range ckpt.Tensors() {
		data, err := ckpt.Bytes(info.Name)
		require.NoError(t, err)
		dtype := info.DType
		if info.Name == "model.norm.weight" {
			dtype = safetensors.I32
		}
		require.NoError(t, w.Add(info.Name, dtype, info.Shape, data))
	}
	require.NoError(t, w.WriteFile(filepath.Join(dir, "other.safetensors"))) // w views the mapped file
	require.NoError(t, ckpt.Close())
	require.NoError(t, os.Rename(filepath.Join(dir, "other.safetensors"), filepath.Join(dir, safetensors.SingleFileName)))
	_, err = Load(b, dir, LoadOptions{DType: dtypes.Float32})
	require.ErrorContains(t, err, `tensor "model.norm.weight" has dtype I32, want a floating-point weight`)
}

// config.json that is a named pipe, a folder or larger than MaxConfigSize is refused
// without being read.
func TestConfigFileKinds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	require.NoError(t, os.Mkdir(path, 0o755))
	_, err := LoadConfig(dir)
	require.ErrorContains(t, err, "not a regular file (a folder)")
	require.NoError(t, os.Remove(path))

	require.NoError(t, os.WriteFile(path, configJSON(t, nil), 0o644))
	require.NoError(t, os.Truncate(path, MaxConfigSize+1))
	_, err = LoadConfig(dir)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "more than the limit of 1048576")
	require.NoError(t, os.Remove(path))

	if err := mkfifo(path); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadConfig(dir); done <- err }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, path+": not a regular file (a named pipe)")
	case <-time.After(10 * time.Second):
		t.Fatal("LoadConfig blocks on a named pipe")
	}
}

// A nil backend, a nil or zero model and a closed one are clear errors, not panics nor
// errors about shapes.
func TestNilAndClosedModels(t *testing.T) {
	_, err := Load(nil, writeCheckpoint(t, nil), LoadOptions{})
	require.ErrorContains(t, err, "no backend")
	_, err = NewRandom(nil, tinyConfig(), dtypes.Float32, 1)
	require.ErrorContains(t, err, "no backend")
	_, err = FromCheckpoint(testutil.Backend(t), tinyConfig(), nil, LoadOptions{})
	require.ErrorContains(t, err, "no checkpoint")

	var none *Model
	_, err = none.Logits([]int{1}, 4)
	require.ErrorContains(t, err, "nil model")
	_, err = none.NewSession(8, 4)
	require.ErrorContains(t, err, "nil model")
	require.NoError(t, none.Close())
	_, err = (&Model{Config: tinyConfig()}).Logits([]int{1}, 4)
	require.ErrorContains(t, err, "has no backend")

	m, err := NewRandom(testutil.Backend(t), tinyConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	_, err = m.Logits([]int{1, 2}, 2)
	require.NoError(t, err)
	p, err := m.Compile("add", []shapes.Shape{shapes.Make(dtypes.Int32)}, func(_ *Weights, in []*Node) []*Node { return in })
	require.NoError(t, err)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "closing again does nothing")

	_, err = m.Logits([]int{1, 2}, 2)
	require.ErrorIs(t, err, ErrClosed)
	_, err = m.NewSession(8, 4)
	require.ErrorIs(t, err, ErrClosed)
	_, err = m.NewCache(1, 8)
	require.ErrorIs(t, err, ErrClosed)
	_, err = m.CachedProgram("k", nil, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, err = p.Run()
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, strings.Contains(err.Error(), "InvalidDType"), err.Error())
}

// Sizes callers give are checked too: empty, negative or overflowing ones are errors.
func TestBadSizes(t *testing.T) {
	m := randomModel(t, tinyConfig(), 1)
	for _, c := range []struct{ batch, capacity int }{{0, 8}, {-1, 8}, {1, 0}, {1, -8}, {math.MaxInt, 8}, {1, math.MaxInt}} {
		_, err := m.NewCache(c.batch, c.capacity)
		require.Error(t, err, "%+v", c)
	}
	_, err := m.NewCache(math.MaxInt/2, 8)
	require.ErrorContains(t, err, "overflows", "checked before the backend is asked")
	_, err = m.NewSession(8, 0)
	require.ErrorContains(t, err, "block size must be at least 1")
	_, err = m.Logits([]int{1}, -3)
	require.ErrorContains(t, err, "block size must be at least 1")
	_, err = m.Logits(make([]int, m.Config.MaxPositionEmbeddings+1), 1)
	require.ErrorContains(t, err, "exceed max_position_embeddings")

	_, err = mulInts(math.MaxInt/2, 3)
	require.ErrorContains(t, err, "overflows")
	_, err = addInts(math.MaxInt, 1)
	require.ErrorContains(t, err, "overflows")
	got, err := mulInts(1<<20, 1<<20, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 1<<60, got)
	require.True(t, errors.Is(ErrClosed, ErrClosed))
}
