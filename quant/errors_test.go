package quant

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// Unsupported quantization_config contents are errors naming what is unsupported.
func TestQuantizationConfigErrors(t *testing.T) {
	good := qcJSON("channel", true)
	cases := []struct{ old, new, want string }{
		{`"compressed-tensors"`, `"gptq"`, `quant_method "gptq" is not supported`},
		{`"format":"float-quantized"`, `"format":"pack-quantized"`, `format "pack-quantized" is not supported`},
		{`"quantization_status":"compressed"`, `"quantization_status":"frozen"`, `quantization_status "frozen"`},
		{`"strategy":"channel"`, `"strategy":"group"`, `strategy "group" is not supported`},
		{`"strategy":"channel"`, `"strategy":"block"`, `strategy "block" is not supported`},
		{`"group_size":null`, `"group_size":128`, `group_size 128 is not supported`},
		{`"strategy":"tensor","dynamic":false`, `"strategy":"token","dynamic":true`, `dynamic quantization is not supported`},
		{`"strategy":"tensor","dynamic":false`, `"strategy":"tensor","dynamic":"local"`, `dynamic quantization is not supported`},
		{`"strategy":"tensor","dynamic":false`, `"strategy":"token","dynamic":false`, `input_activations: strategy "token"`},
		{`{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"`, `{"num_bits":4,"type":"float","symmetric":true,"strategy":"channel"`, "num_bits 4"},
		{`{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"`, `{"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"`, `type "int" is not supported`},
		{`{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"`, `{"num_bits":8,"type":"float","symmetric":false,"strategy":"channel"`, "asymmetric"},
		{`"kv_cache_scheme":null`, `"kv_cache_scheme":{"num_bits":8}`, "kv_cache_scheme is not supported"},
		{`"ignore":["lm_head"]`, `"ignore":["re:(["]`, "invalid regular expression"},
		{`"input_activations":{`, `"output_activations":{"num_bits":8,"type":"float"},"input_activations":{`, "output_activations are not supported"},
		{`"dynamic":false}`, `"dynamic":"sometimes"}`, `"dynamic" must be true, false or "local"`},
	}
	for _, tc := range cases {
		qc := strings.Replace(good, tc.old, tc.new, 1)
		require.NotEqual(t, good, qc, "replacement %q not found", tc.old)
		_, err := ParseQuantizationConfig([]byte(`{"quantization_config":` + qc + `}`))
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	qc, err := ParseQuantizationConfig([]byte(`{"quantization_config":` + good + `}`))
	require.NoError(t, err)
	assert.Equal(t, StrategyChannel, qc.ConfigGroups["group_0"].Weights.Strategy)
	assert.Nil(t, qc.Scheme("lm_head"))
	assert.NotNil(t, qc.Scheme("model.layers.0.mlp.up_proj"))
	none, err := ParseQuantizationConfig([]byte(`{"vocab_size": 3}`))
	require.NoError(t, err)
	assert.Nil(t, none)
	_, err = ParseQuantizationConfig([]byte(`{`))
	require.ErrorContains(t, err, "invalid config.json")
	_, err = IsFP8Checkpoint(t.TempDir())
	require.ErrorContains(t, err, "reading config")
}

// Targets and ignore entries match names, "Linear" and anchored "re:" expressions.
func TestSchemeMatching(t *testing.T) {
	qc := &QuantizationConfig{
		ConfigGroups: map[string]ConfigGroup{
			"a": {Targets: []string{"re:.*self_attn\\..*"}},
			"b": {Targets: []string{"model.layers.0.mlp.down_proj"}},
		},
		Ignore: []string{"re:.*k_proj", "lm_head"},
	}
	assert.Equal(t, qc.ConfigGroups["a"].Targets, qc.Scheme("model.layers.1.self_attn.q_proj").Targets)
	assert.Nil(t, qc.Scheme("model.layers.1.self_attn.k_proj"))
	assert.NotNil(t, qc.Scheme("model.layers.0.mlp.down_proj"))
	assert.Nil(t, qc.Scheme("model.layers.1.mlp.down_proj"))
	assert.Nil(t, qc.Scheme("lm_head"))
}

// Checkpoints with missing, misshapen or inconsistent tensors fail to load with errors
// naming them.
func TestLoadCheckpointErrors(t *testing.T) {
	perTensor := func(m string) (string, float32) { return "tensor", partFactor(m) }
	inputs := func(string) float32 { return 0.02 }
	const q = "model.layers.0.self_attn.q_proj"
	cases := []struct {
		name   string
		qc     string
		inputs func(string) float32
		edit   func(map[string]*ctTensor)
		want   string
	}{
		{"missing weight_scale", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) { delete(ts, q+".weight_scale") },
			`missing tensor "` + q + `.weight_scale"`},
		{"missing weight_scale, no config", "", nil,
			func(ts map[string]*ctTensor) { delete(ts, q+".weight_scale") },
			`missing tensor "` + q + `.weight_scale"`},
		{"weight_scale shape", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) {
				ts[q+".weight_scale"] = &ctTensor{safetensors.F32, []int{2}, make([]byte, 8)}
			},
			`tensor "` + q + `.weight_scale" has shape [2], want [1] (per tensor) or [32, 1] (per channel)`},
		{"weight_scale against strategy", qcJSON("channel", false), nil, nil,
			`but quantization_config says strategy "channel"`},
		{"weight_scale dtype", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) {
				ts[q+".weight_scale"] = &ctTensor{safetensors.I32, []int{1}, []byte{1, 0, 0, 0}}
			},
			"has dtype I32, want F32, BF16, F16 or F64"},
		{"zero weight_scale", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) {
				ts[q+".weight_scale"] = &ctTensor{safetensors.F32, []int{1}, make([]byte, 4)}
			},
			"scale must be a positive finite number"},
		{"weight shape", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) { ts[q+".weight"].shape = []int{16, 64} },
			`tensor "` + q + `.weight" has shape [16 64], want [32 32]`},
		{"missing input_scale", qcJSON("tensor", true), inputs,
			func(ts map[string]*ctTensor) { delete(ts, q+".input_scale") },
			`missing tensor "` + q + `.input_scale"`},
		{"input_scale shape", qcJSON("tensor", true), inputs,
			func(ts map[string]*ctTensor) {
				ts[q+".input_scale"] = &ctTensor{safetensors.F32, []int{2}, make([]byte, 8)}
			},
			`tensor "` + q + `.input_scale" has shape [2]`},
		{"input_scale without input_activations", qcJSON("tensor", false), inputs, nil,
			"quantization_config has no input_activations"},
		{"input_scale on some parts", "", inputs,
			func(ts map[string]*ctTensor) { delete(ts, q+".input_scale") },
			"2 of its 3 parts have an input_scale"},
		{"dense weight the config quantizes", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) {
				ts[q+".weight"] = &ctTensor{safetensors.BF16, []int{32, 32}, make([]byte, 2048)}
			},
			"quantization_config quantizes \"" + q + "\", but its weight is stored as BF16"},
		{"NaN byte", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) { ts[q+".weight"].data[5] = 0x7f },
			"NaN byte 0x7f at index 5"},
		{"zero point", qcJSON("tensor", false), nil,
			func(ts map[string]*ctTensor) {
				ts[q+".weight_zero_point"] = &ctTensor{safetensors.F32, []int{1}, make([]byte, 4)}
			},
			`unexpected tensor(s) in the checkpoint: ["` + q + `.weight_zero_point"]`},
		{"unsupported config", strings.Replace(qcJSON("tensor", false), `"num_bits":8`, `"num_bits":4`, 1), nil, nil,
			"unsupported quantization_config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ck := &ctCheckpoint{cfg: tinyConfig(), scaling: perTensor, inputs: tc.inputs, qc: tc.qc, edit: tc.edit}
			dir := t.TempDir()
			ck.write(t, dir)
			_, err := Load(testBackend(t), dir, Options{}, model.LoadOptions{DType: dtypes.Float32})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Calibrations that do not fit the model, or are malformed, are errors.
func TestCalibrationErrors(t *testing.T) {
	cfg := tinyConfig()
	full := func() *Calibration {
		c := &Calibration{Format: CalibrationFormat, DType: CalibrationDType, BlockSize: 4, Layers: map[string]LayerStats{}}
		for _, name := range LayerNames(cfg) {
			c.Layers[name] = LayerStats{InputAmax: 3}
		}
		return c
	}
	require.NoError(t, full().Check(cfg, true))

	unknown := full()
	unknown.Layers["model.layers.7.mlp.down_proj"] = LayerStats{InputAmax: 1}
	require.ErrorContains(t, unknown.Check(cfg, false), `names layers the model does not have: ["model.layers.7.mlp.down_proj"]`)
	missing := full()
	delete(missing.Layers, "model.layers.1.self_attn.o_proj")
	require.ErrorContains(t, missing.Check(cfg, false), `lacks layers to quantize: ["model.layers.1.self_attn.o_proj"]`)
	noHead := full()
	delete(noHead.Layers, HeadName)
	require.NoError(t, noHead.Check(cfg, false))
	require.ErrorContains(t, noHead.Check(cfg, true), `lacks layers to quantize: ["lm_head"]`)

	// Through loading and QuantizeModel.
	ck := &ctCheckpoint{cfg: cfg, scaling: func(string) (string, float32) { return "channel", 1 }}
	dir := t.TempDir()
	ck.write(t, dir)
	_, err := Load(testBackend(t), dir, Options{Calibration: unknown}, model.LoadOptions{DType: dtypes.Float32})
	require.ErrorContains(t, err, "does not have")
	_, err = model.Load(testBackend(t), dir, model.LoadOptions{DType: dtypes.Float32, Linear: Options{Calibration: missing}})
	require.ErrorContains(t, err, `the calibration has no layer "model.layers.1.self_attn.o_proj"`)
	m, err := model.NewRandom(testBackend(t), cfg, dtypes.Float32, 1)
	require.NoError(t, err)
	defer m.Close()
	require.ErrorContains(t, QuantizeModel(m, Options{Calibration: missing}), "lacks layers")
	require.ErrorContains(t, QuantizeModel(m, Options{Strategy: "block"}), `unsupported weight strategy "block"`)

	// Malformed files.
	for _, tc := range []struct{ content, want string }{
		{`{`, "invalid calibration JSON"},
		{`{"format":"other","dtype":"float8_e4m3fn","block_size":4,"layers":{"lm_head":{"input_amax":1}}}`, `format "other"`},
		{`{"format":"blockdiff-calibration/v1","dtype":"int8","block_size":4,"layers":{"lm_head":{"input_amax":1}}}`, `dtype "int8"`},
		{`{"format":"blockdiff-calibration/v1","dtype":"float8_e4m3fn","block_size":0,"layers":{"lm_head":{"input_amax":1}}}`, "block_size"},
		{`{"format":"blockdiff-calibration/v1","dtype":"float8_e4m3fn","block_size":4,"layers":{}}`, "no layers"},
		{`{"format":"blockdiff-calibration/v1","dtype":"float8_e4m3fn","block_size":4,"layers":{"lm_head":{"input_amax":-1}}}`, "finite and non-negative"},
		{`{"format":"blockdiff-calibration/v1","dtype":"float8_e4m3fn","block_size":4,"layers":{"lm_head":{"input_amax":1e300}}}`, "finite and non-negative"},
	} {
		path := filepath.Join(t.TempDir(), "calibration.json")
		require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o644))
		_, err := ReadCalibration(path)
		require.ErrorContains(t, err, tc.want)
	}
	_, err = ReadCalibration(filepath.Join(t.TempDir(), "absent.json"))
	require.ErrorContains(t, err, "reading calibration")
}

// Bad arguments to the layer constructor and the loader options.
func TestArgumentErrors(t *testing.T) {
	b := testBackend(t)
	_, err := NewFP8Linear(b, make([]uint8, 6), 2, 3, []float32{1, 1, 1}, 0)
	require.ErrorContains(t, err, "needs 1 or 2 scales")
	_, err = NewFP8Linear(b, make([]uint8, 5), 2, 3, []float32{1}, 0)
	require.ErrorContains(t, err, "needs 6 bytes")
	_, err = NewFP8Linear(b, nil, 0, 3, []float32{1}, 0)
	require.ErrorContains(t, err, "positive sizes")
	_, err = NewFP8Linear(b, make([]uint8, 6), 2, 3, []float32{-1}, 0)
	require.ErrorContains(t, err, "positive finite")
	_, err = NewFP8Linear(b, make([]uint8, 6), 2, 3, []float32{1}, float32(math.NaN()))
	require.ErrorContains(t, err, "input scale")

	ck := &ctCheckpoint{cfg: tinyConfig(), scaling: func(string) (string, float32) { return "channel", 1 }}
	dir := t.TempDir()
	ck.write(t, dir)
	_, err = Load(b, dir, Options{Strategy: "group"}, model.LoadOptions{})
	require.ErrorContains(t, err, `unsupported weight strategy "group"`)
	_, err = model.Load(b, dir, model.LoadOptions{Linear: Options{Strategy: "group"}})
	require.ErrorContains(t, err, `unsupported weight strategy "group"`)

	_, err = RandomSequences(0, 4, 10, 1)
	require.Error(t, err)
	_, err = ChunkSequences([][]int{{1}}, 0)
	require.Error(t, err)
}
