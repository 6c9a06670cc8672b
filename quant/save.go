package quant

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/hostdata"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// SaveOptions configure [Save].
type SaveOptions struct {
	// SourceConfig is the config.json (or the checkpoint folder holding it) the model was
	// loaded from: the saved config.json is a copy of it plus quantization_config. Empty
	// generates one from the model's configuration (for random models).
	SourceConfig string
	// DenseDType stores the tensors that are not FP8 (embeddings, norms, unquantized
	// linear layers): safetensors.BF16 (the default), F16 or F32.
	DenseDType safetensors.DType
	// ShardBytes, when positive, writes the weights as shards of at most that many bytes
	// with an index (model-0000k-of-0000n.safetensors and model.safetensors.index.json)
	// instead of one model.safetensors.
	ShardBytes int64
}

// Save writes a model with FP8 linear layers as a compressed-tensors checkpoint folder
// that vLLM-style loaders (and [Load], or model.Load with [Options]) read: dir/config.json
// and dir/model.safetensors.
//
// Fused layers are split back into their checkpoint modules (q_proj, k_proj, v_proj;
// gate_proj, up_proj), each with its F8_E4M3 weight [out, in], a float32 weight_scale
// ([1] per tensor, the layer's shared scale; [out, 1] per channel) and, when the layer has
// one, its float32 input_scale [1]. Everything else is stored in opts.DenseDType. A head
// that is not the tied embedding is written as lm_head.weight (and tie_word_embeddings
// becomes false). Loading the folder gives the same weights, hence identical logits
// when the dense tensors' values fit DenseDType (as bf16 checkpoint values do).
func Save(m *model.Model, dir string, opts SaveOptions) error {
	dense := opts.DenseDType
	if dense == 0 {
		dense = safetensors.BF16
	}
	if dense != safetensors.BF16 && dense != safetensors.F16 && dense != safetensors.F32 {
		return fmt.Errorf("quant: unsupported dense dtype %s for saving (supported: BF16, F16, F32)", dense)
	}
	config, err := baseConfig(opts.SourceConfig, m.Config)
	if err != nil {
		return err
	}
	if err := checkSameShape(config, m.Config); err != nil {
		return err
	}
	s := &saver{m: modelcore.Of(m), dense: dense, schemes: map[schemeKey][]string{}}
	untie, err := s.addTensors()
	if err != nil {
		return err
	}
	qc, err := s.quantizationConfig()
	if err != nil {
		return err
	}
	if config["quantization_config"], err = json.Marshal(qc); err != nil {
		return fmt.Errorf("quant: encoding quantization_config: %w", err)
	}
	if untie {
		config["tie_word_embeddings"] = json.RawMessage("false")
	}
	configJSON, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return fmt.Errorf("quant: encoding config.json: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	if err := s.w.SetMetadata("format", "pt"); err != nil {
		return err
	}
	if opts.ShardBytes > 0 {
		if _, err := s.w.WriteShards(dir, "model", opts.ShardBytes); err != nil {
			return fmt.Errorf("quant: writing weights: %w", err)
		}
	} else if err := s.w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)); err != nil {
		return fmt.Errorf("quant: writing weights: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(configJSON, '\n'), 0o644); err != nil {
		return fmt.Errorf("quant: writing config.json: %w", err)
	}
	return nil
}

// checkSameShape rejects a source config.json that describes another model.
func checkSameShape(config map[string]json.RawMessage, cfg model.Config) error {
	data, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("quant: encoding config: %w", err)
	}
	src, err := model.ParseConfig(data)
	if err != nil {
		return fmt.Errorf("quant: source config: %w", err)
	}
	a := []int{src.VocabSize, src.HiddenSize, src.IntermediateSize, src.NumLayers, src.NumHeads, src.NumKVHeads, src.HeadDim}
	b := []int{cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Errorf("quant: the source config describes another model (sizes %v, the model's %v)", a, b)
		}
	}
	return nil
}

// schemeKey groups FP8 modules that share a quantization scheme.
type schemeKey struct {
	strategy Strategy
	input    bool
}

// saver collects a model's tensors for writing.
type saver struct {
	m       *modelcore.Model
	dense   safetensors.DType
	w       safetensors.Writer
	schemes map[schemeKey][]string // FP8 modules by scheme
	ignored []string               // linear modules stored dense
}

// addTensors adds every tensor; untie reports a tied head written as lm_head.
func (s *saver) addTensors() (untie bool, err error) {
	m := s.m
	if err := s.addDense("model.embed_tokens.weight", m.Embed); err != nil {
		return false, err
	}
	for i, l := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		if err := s.addDense(p+"input_layernorm.weight", l.AttnNorm); err != nil {
			return false, err
		}
		if err := s.addDense(p+"post_attention_layernorm.weight", l.MLPNorm); err != nil {
			return false, err
		}
	}
	if err := s.addDense("model.norm.weight", m.FinalNorm); err != nil {
		return false, err
	}
	linears := m.Linears()
	for i, layout := range linearLayouts(model.Config(m.Config)) {
		lin := linears[i].Linear
		if linears[i].Name != layout.name {
			return false, fmt.Errorf("quant: the model's layer %d is %s, expected %s", i, linears[i].Name, layout.name)
		}
		if layout.name == HeadName {
			if d, ok := lin.(*modelcore.Dense); ok && d.Weight == m.Embed {
				continue // Tied: the embedding is the head.
			}
			untie = m.Config.TieWordEmbeddings
		}
		if err := s.addLinear(layout, lin); err != nil {
			return false, fmt.Errorf("quant: saving %s: %w", layout.name, err)
		}
	}
	return untie, nil
}

// addDense adds a Float32 or BFloat16 device tensor in the dense dtype.
func (s *saver) addDense(name string, t *tensors.Tensor) error {
	values, err := hostdata.Float32s(t)
	if err != nil {
		return fmt.Errorf("quant: saving %s: %w", name, err)
	}
	return s.w.AddFloat32s(name, s.dense, t.Shape().Dimensions, values)
}

// addLinear adds a layer's modules, splitting its rows among them.
func (s *saver) addLinear(layout linearLayout, lin modelcore.Linear) error {
	total := 0
	for _, out := range layout.outs {
		total += out
	}
	if lin.OutFeatures() != total {
		return fmt.Errorf("%d output features, expected %d", lin.OutFeatures(), total)
	}
	in := lin.InFeatures()
	switch l := lin.(type) {
	case *modelcore.Dense:
		values, err := hostdata.Float32s(l.Weight)
		if err != nil {
			return err
		}
		row := 0
		for i, part := range layout.parts {
			out := layout.outs[i]
			if err := s.w.AddFloat32s(part+".weight", s.dense, []int{out, in}, values[row*in:(row+out)*in]); err != nil {
				return err
			}
			s.ignored = append(s.ignored, part)
			row += out
		}
		return nil
	case *FP8Linear:
		return s.addFP8(layout, l)
	}
	return fmt.Errorf("cannot save a linear layer of type %T", lin)
}

// addFP8 adds the modules of an FP8 layer with their scales.
func (s *saver) addFP8(layout linearLayout, l *FP8Linear) error {
	weight, scales, inputScale, err := l.Host()
	if err != nil {
		return err
	}
	in := l.InFeatures()
	key := schemeKey{strategy: l.Strategy(), input: inputScale != 0}
	row := 0
	for i, part := range layout.parts {
		out := layout.outs[i]
		errs := []error{s.w.Add(part+".weight", safetensors.F8E4M3, []int{out, in}, weight[row*in:(row+out)*in])}
		if key.strategy == StrategyTensor {
			errs = append(errs, s.w.AddFloat32s(part+".weight_scale", safetensors.F32, []int{1}, scales))
		} else {
			errs = append(errs, s.w.AddFloat32s(part+".weight_scale", safetensors.F32, []int{out, 1}, scales[row:row+out]))
		}
		if key.input {
			errs = append(errs, s.w.AddFloat32s(part+".input_scale", safetensors.F32, []int{1}, []float32{inputScale}))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		s.schemes[key] = append(s.schemes[key], part)
		row += out
	}
	return nil
}

// quantizationConfig describes the saved FP8 modules: one group targeting "Linear"
// when they share a scheme (the unquantized modules ignored), else one group per scheme
// naming its modules.
func (s *saver) quantizationConfig() (*QuantizationConfig, error) {
	if len(s.schemes) == 0 {
		return nil, errors.New("quant: the model has no FP8 layers to save")
	}
	qc := &QuantizationConfig{
		QuantMethod: QuantMethod, Format: FormatFloatQuantized, QuantizationStatus: StatusCompressed,
		ConfigGroups: map[string]ConfigGroup{}, Ignore: s.ignored, KVCacheScheme: json.RawMessage("null"),
	}
	if qc.Ignore == nil {
		qc.Ignore = []string{}
	}
	keys := []schemeKey{{StrategyChannel, true}, {StrategyChannel, false}, {StrategyTensor, true}, {StrategyTensor, false}}
	for _, key := range keys {
		modules, ok := s.schemes[key]
		if !ok {
			continue
		}
		group := ConfigGroup{Targets: modules, Weights: fp8Args(key.strategy)}
		if len(s.schemes) == 1 {
			group.Targets = []string{"Linear"}
		}
		if key.input {
			group.InputActivations = fp8Args(StrategyTensor)
		}
		qc.ConfigGroups[fmt.Sprintf("group_%d", len(qc.ConfigGroups))] = group
	}
	if err := qc.Validate(); err != nil {
		return nil, fmt.Errorf("quant: internal error: %w", err)
	}
	return qc, nil
}

// fp8Args are static symmetric FP8 E4M3 arguments of a strategy, as llm-compressor
// writes them.
func fp8Args(strategy Strategy) *QuantizationArgs {
	bits, symmetric := 8, true
	return &QuantizationArgs{NumBits: &bits, Type: "float", Symmetric: &symmetric, Strategy: strategy,
		Dynamic: DynamicFalse, Observer: "minmax"}
}
