package quant

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// ctModule is one linear module of a hand-written compressed-tensors checkpoint.
type ctModule struct {
	name       string
	out, in    int
	weight     []float32 // The original values, [out, in].
	bytes      []uint8   // E4M3 bytes of weight / scale.
	scales     []float32 // One, or one per row.
	scaleShape []int     // How weight_scale is stored.
	inputScale float32   // 0: none.
}

// dequantized returns the module's weight as its bytes and scales say.
func (m *ctModule) dequantized() []float32 {
	out := make([]float32, len(m.bytes))
	for i, b := range m.bytes {
		s := m.scales[0]
		if len(m.scales) > 1 {
			s = m.scales[i/m.in]
		}
		out[i] = DecodeE4M3(b) * s
	}
	return out
}

// ctCheckpoint describes a hand-written checkpoint of tinyConfig's shape: for each
// module, how its weight scale is stored ("tensor", "scalar" or "channel"), a factor
// making the parts of a fused layer differ, and input scales.
type ctCheckpoint struct {
	cfg     model.Config
	scaling func(module string) (kind string, factor float32)
	inputs  func(module string) float32 // 0: no input_scale.
	qc      string                      // quantization_config JSON; empty: none.
	edit    func(tensors map[string]*ctTensor)
	modules map[string]*ctModule
}

// ctTensor is a tensor about to be written.
type ctTensor struct {
	dtype safetensors.DType
	shape []int
	data  []byte
}

// write builds the checkpoint in dir: FP8 linear modules (lm_head in bf16, ignored),
// random bf16 embeddings and norms.
func (c *ctCheckpoint) write(t *testing.T, dir string) {
	t.Helper()
	cfg := c.cfg
	rng := rand.New(rand.NewPCG(11, 12))
	tensors := map[string]*ctTensor{}
	addFloats := func(name string, dtype safetensors.DType, shape []int, values []float32) {
		size := 1
		for _, d := range shape {
			size *= d
		}
		data := make([]byte, size*dtype.Size())
		switch dtype {
		case safetensors.F32:
			for i, v := range values {
				bits := math.Float32bits(v)
				data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
			}
		default: // BF16
			for i, v := range values {
				bits := math.Float32bits(v) >> 16 // Values are made bf16-exact below.
				data[2*i], data[2*i+1] = byte(bits), byte(bits>>8)
			}
		}
		tensors[name] = &ctTensor{dtype, shape, data}
	}
	random := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(math.Float32bits(float32(rng.NormFloat64()*std)) &^ 0xffff) // bf16-exact
		}
		return v
	}
	ones := func(n int) []float32 {
		v := random(n, 0.1)
		for i := range v {
			v[i] = math.Float32frombits(math.Float32bits(1+v[i]) &^ 0xffff)
		}
		return v
	}
	h := cfg.HiddenSize
	addFloats("model.embed_tokens.weight", safetensors.BF16, []int{cfg.VocabSize, h}, random(cfg.VocabSize*h, 1))
	addFloats("model.norm.weight", safetensors.BF16, []int{h}, ones(h))
	c.modules = map[string]*ctModule{}
	for _, layout := range linearLayouts(cfg) {
		in := h
		if strings.HasSuffix(layout.name, "o_proj") {
			in = cfg.NumHeads * cfg.HeadDim
		} else if strings.HasSuffix(layout.name, "down_proj") {
			in = cfg.IntermediateSize
		}
		for i, part := range layout.parts {
			out := layout.outs[i]
			w := random(out*in, 0.15)
			if part == HeadName {
				addFloats(part+".weight", safetensors.BF16, []int{out, in}, w)
				continue
			}
			kind, factor := c.scaling(part)
			m := &ctModule{name: part, out: out, in: in, weight: w, bytes: make([]uint8, len(w))}
			if kind == "channel" {
				m.scaleShape = []int{out, 1}
				for o := range out {
					amax, err := amaxOf(w[o*in : (o+1)*in])
					require.NoError(t, err)
					m.scales = append(m.scales, ScaleFromAmax(amax)*factor)
					EncodeE4M3Slice(m.bytes[o*in:(o+1)*in], w[o*in:(o+1)*in], m.scales[o], true)
				}
			} else {
				m.scaleShape = []int{1}
				if kind == "scalar" {
					m.scaleShape = []int{}
				}
				amax, err := amaxOf(w)
				require.NoError(t, err)
				m.scales = []float32{ScaleFromAmax(amax) * factor}
				EncodeE4M3Slice(m.bytes, w, m.scales[0], true)
			}
			tensors[part+".weight"] = &ctTensor{safetensors.F8E4M3, []int{out, in}, m.bytes}
			addFloats(part+".weight_scale", safetensors.F32, m.scaleShape, m.scales)
			if c.inputs != nil {
				if m.inputScale = c.inputs(part); m.inputScale != 0 {
					addFloats(part+".input_scale", safetensors.F32, []int{1}, []float32{m.inputScale})
				}
			}
			c.modules[part] = m
		}
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		addFloats(p+"input_layernorm.weight", safetensors.BF16, []int{h}, ones(h))
		addFloats(p+"post_attention_layernorm.weight", safetensors.BF16, []int{h}, ones(h))
	}
	if c.edit != nil {
		c.edit(tensors)
	}
	var w safetensors.Writer
	for name, ts := range tensors {
		require.NoError(t, w.Add(name, ts.dtype, ts.shape, ts.data))
	}
	require.NoError(t, w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)))
	fields, err := configFields(cfg)
	require.NoError(t, err)
	config, err := json.Marshal(fields)
	require.NoError(t, err)
	if c.qc != "" {
		config = append(config[:len(config)-1], []byte(`,"quantization_config":`+c.qc+"}")...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644))
}

// writeDense writes the dequantized weights of the modules as a float32 checkpoint of
// the same model (the other tensors copied from the FP8 one).
func (c *ctCheckpoint) writeDense(t *testing.T, fp8Dir, dir string) {
	t.Helper()
	src, err := safetensors.OpenCheckpoint(fp8Dir)
	require.NoError(t, err)
	defer src.Close()
	var w safetensors.Writer
	for _, info := range src.Tensors() {
		if strings.HasSuffix(info.Name, "_scale") || info.DType == safetensors.F8E4M3 {
			continue
		}
		data, err := src.Bytes(info.Name)
		require.NoError(t, err)
		require.NoError(t, w.Add(info.Name, info.DType, info.Shape, data))
	}
	for _, layout := range linearLayouts(c.cfg) {
		// Fused parts that all have per-tensor scales share the largest: their values are
		// those requantized to it, as the loader does (and vLLM).
		var shared float32
		for _, name := range layout.parts {
			if m, ok := c.modules[name]; ok && len(m.scales) == 1 && shared >= 0 {
				shared = max(shared, m.scales[0])
			} else {
				shared = -1
			}
		}
		for _, name := range layout.parts {
			m, ok := c.modules[name]
			if !ok {
				continue
			}
			values := m.dequantized()
			if shared > 0 {
				for i, b := range m.bytes {
					values[i] = DecodeE4M3(EncodeE4M3(DecodeE4M3(b)*m.scales[0]/shared, true)) * shared
				}
			}
			require.NoError(t, w.AddFloat32s(m.name+".weight", safetensors.F32, []int{m.out, m.in}, values))
		}
	}
	require.NoError(t, w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)))
	config, err := os.ReadFile(filepath.Join(fp8Dir, "config.json"))
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(config, &fields))
	delete(fields, "quantization_config")
	config, err = json.Marshal(fields)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644))
}

// qcJSON is a compressed-tensors FP8 quantization_config of one group.
func qcJSON(strategy string, inputs bool) string {
	input := "null"
	if inputs {
		input = `{"num_bits":8,"type":"float","symmetric":true,"strategy":"tensor","dynamic":false}`
	}
	return `{"quant_method":"compressed-tensors","format":"float-quantized","quantization_status":"compressed",
		"config_groups":{"group_0":{"targets":["Linear"],
		"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"` + strategy + `","dynamic":false,"group_size":null},"input_activations":` + input + `}},
		"ignore":["lm_head"],"kv_cache_scheme":null}`
}

// partFactor makes the parts of fused layers get different scales: k and up ×1.5, v ×2.
func partFactor(module string) float32 {
	switch {
	case strings.HasSuffix(module, "k_proj"), strings.HasSuffix(module, "up_proj"):
		return 1.5
	case strings.HasSuffix(module, "v_proj"):
		return 2
	}
	return 1
}

// Hand-written compressed-tensors checkpoints load: per-tensor (fused parts with
// different scales requantized to the largest, input scales shared as the largest),
// per-channel (scales concatenated, bytes kept), scalar-shaped scales, and parts mixing
// both strategies. Weight-only, their logits match a float32 checkpoint of the same
// dequantized weights.
func TestLoadCompressedTensors(t *testing.T) {
	inputs := func(module string) float32 { return 0.01 * partFactor(module) }
	cases := []struct {
		name    string
		scaling func(string) (string, float32)
		qc      string
		inputs  func(string) float32
	}{
		{"per-tensor", func(m string) (string, float32) { return "tensor", partFactor(m) }, qcJSON("tensor", false), nil},
		{"per-tensor+inputs", func(m string) (string, float32) { return "tensor", partFactor(m) }, qcJSON("tensor", true), inputs},
		{"scalar-shape", func(m string) (string, float32) { return "scalar", partFactor(m) }, qcJSON("tensor", false), nil},
		{"per-channel", func(m string) (string, float32) { return "channel", partFactor(m) }, qcJSON("channel", false), nil},
		{"per-channel+inputs", func(m string) (string, float32) { return "channel", partFactor(m) }, qcJSON("channel", true), inputs},
		{"mixed, no config", func(m string) (string, float32) {
			if strings.HasSuffix(m, "q_proj") {
				return "tensor", 1
			}
			return "channel", partFactor(m)
		}, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ck := &ctCheckpoint{cfg: tinyConfig(), scaling: tc.scaling, inputs: tc.inputs, qc: tc.qc}
			dir := t.TempDir()
			ck.write(t, dir)
			fp8, err := IsFP8Checkpoint(dir)
			require.NoError(t, err)
			assert.Equal(t, tc.qc != "", fp8)
			m := loadFP8(t, dir, Options{})
			for _, nl := range modelcore.Of(m).Linears() {
				if nl.Name == HeadName {
					assert.IsType(t, &modelcore.Dense{}, nl.Linear)
					continue
				}
				checkFusedLayer(t, ck, nl)
			}
			if tc.inputs != nil {
				return // Activation quantization: the dense model is no reference.
			}
			denseDir := t.TempDir()
			ck.writeDense(t, dir, denseDir)
			dense := loadDense(t, denseDir)
			tokens := []int{1, 4, 9, 16, 25, 36, 47, 3, 8}
			want, err := dense.Logits(tokens, 4)
			require.NoError(t, err)
			got, err := m.Logits(tokens, 4)
			require.NoError(t, err)
			var worst, peak float64
			for i := range want {
				for j := range want[i] {
					worst = math.Max(worst, math.Abs(float64(want[i][j]-got[i][j])))
					peak = math.Max(peak, math.Abs(float64(want[i][j])))
				}
			}
			t.Logf("max |Δlogit| / max |logit| = %.2g", worst/peak)
			assert.Less(t, worst/peak, 1e-5)
		})
	}
}

// checkFusedLayer checks a loaded layer against the modules it fuses.
func checkFusedLayer(t *testing.T, ck *ctCheckpoint, nl modelcore.NamedLinear) {
	t.Helper()
	l, ok := nl.Linear.(*FP8Linear)
	require.True(t, ok, "%s is %T", nl.Name, nl.Linear)
	weight, scales, inputScale, err := l.Host()
	require.NoError(t, err)
	var layout linearLayout
	for _, lay := range linearLayouts(ck.cfg) {
		if lay.name == nl.Name {
			layout = lay
		}
	}
	parts := make([]*ctModule, len(layout.parts))
	allTensor := true
	var maxScale, maxInput float32
	for i, name := range layout.parts {
		parts[i] = ck.modules[name]
		allTensor = allTensor && len(parts[i].scales) == 1
		maxScale = max(maxScale, parts[i].scales[0])
		maxInput = max(maxInput, parts[i].inputScale)
	}
	assert.Equal(t, maxInput, inputScale, "%s: input scale", nl.Name)
	row := 0
	for _, p := range parts {
		got := weight[row*p.in : (row+p.out)*p.in]
		switch {
		case allTensor:
			require.Equal(t, []float32{maxScale}, scales, nl.Name)
			for i, b := range p.bytes {
				// The part's value, re-expressed at the shared scale: what the requantized
				// byte decodes to is its nearest E4M3 value.
				want := EncodeE4M3(DecodeE4M3(b)*p.scales[0]/maxScale, true)
				require.Equal(t, want, got[i], "%s: %s byte %d", nl.Name, p.name, i)
			}
		default:
			assert.Equal(t, p.bytes, got, "%s: %s bytes", nl.Name, p.name)
			for o := range p.out {
				want := p.scales[0]
				if len(p.scales) > 1 {
					want = p.scales[o]
				}
				require.Equal(t, want, scales[row+o], "%s: %s scale %d", nl.Name, p.name, o)
			}
		}
		row += p.out
	}
	if !allTensor {
		assert.Equal(t, StrategyChannel, l.Strategy())
	}
}

// A per-tensor part whose scale equals the shared one keeps its bytes; the others are
// rewritten, each value within half an E4M3 step of the original.
func TestRequantizeAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, 4096)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	q, scales, err := quantizeWeight(w, 64, 64, StrategyTensor)
	require.NoError(t, err)
	orig := append([]uint8(nil), q...)
	requantize(q, scales[0], scales[0])
	require.Equal(t, orig, q)
	to := scales[0] * 1.7
	requantize(q, scales[0], to)
	for i, b := range q {
		before := float64(DecodeE4M3(orig[i]) * scales[0])
		after := float64(DecodeE4M3(b) * to)
		// E4M3's relative step is at most 2^-3; subnormals have absolute step 2^-9·scale.
		assert.LessOrEqual(t, math.Abs(after-before), math.Max(math.Abs(before)/16, float64(to)/1024)+1e-12, "element %d", i)
	}
}

// Loading reports progress over every byte of the checkpoint, FP8 or quantized at load.
func TestLoadProgress(t *testing.T) {
	ck := &ctCheckpoint{cfg: tinyConfig(), scaling: func(string) (string, float32) { return "channel", 1 },
		inputs: func(string) float32 { return 0.1 }, qc: qcJSON("channel", true)}
	fp8Dir := t.TempDir()
	ck.write(t, fp8Dir)
	denseDir := t.TempDir()
	ck.writeDense(t, fp8Dir, denseDir)
	for _, dir := range []string{fp8Dir, denseDir} {
		var done, total int64
		progress := func(d, t int64) { done, total = d, t }
		m, err := Load(testBackend(t), dir, Options{}, model.LoadOptions{DType: dtypes.Float32, Progress: progress})
		require.NoError(t, err)
		require.NoError(t, m.Close())
		assert.Positive(t, total)
		assert.Equal(t, total, done, dir)
	}
}
