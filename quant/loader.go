package quant

import (
	"errors"
	"fmt"
	"slices"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/safetensors"
)

// HeadName is the name of the output projection, as a layer and as a checkpoint module.
const HeadName = "lm_head"

var _ modelcore.LinearLoader = Options{}

// LoadLinear implements [modelcore.LinearLoader]; see [Options].
func (o Options) LoadLinear(src *modelcore.LinearSource) (modelcore.Linear, error) {
	if err := o.Strategy.validate(); err != nil {
		return nil, err
	}
	if len(src.Parts) == 0 || len(src.Parts) != len(src.OutFeatures) {
		return nil, fmt.Errorf("quant: layer %s has %d parts and %d output sizes", src.Name, len(src.Parts), len(src.OutFeatures))
	}
	fp8, err := o.storedAsFP8(src)
	if err != nil {
		return nil, err
	}
	head := src.Name == HeadName
	if !fp8 && (head && !o.QuantizeHead || !head && o.Checkpoint != nil) {
		return modelcore.DenseLoader{}.LoadLinear(src)
	}
	var l *FP8Linear
	if fp8 {
		l, err = o.loadFP8(src)
	} else {
		l, err = o.quantizeAtLoad(src)
	}
	if err != nil {
		return nil, err
	}
	l.Decoder = o.Decoder
	return l, nil
}

// storedAsFP8 reports whether the parts' weights are F8_E4M3 (all of them) or float (all
// of them), checking them against the checkpoint's quantization_config when given.
func (o Options) storedAsFP8(src *modelcore.LinearSource) (bool, error) {
	var fp8, dense []string
	for i, part := range src.Parts {
		info, err := src.Checkpoint.Info(part+".weight", src.OutFeatures[i], src.InFeatures)
		if err != nil {
			return false, err
		}
		switch info.DType {
		case safetensors.F8E4M3:
			fp8 = append(fp8, part)
		case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16:
			dense = append(dense, part)
		default:
			return false, fmt.Errorf("quant: tensor %q has dtype %s (supported: F8_E4M3, or a float dtype to quantize)", info.Name, info.DType)
		}
		if o.Checkpoint != nil {
			scheme := o.Checkpoint.Scheme(part)
			if scheme != nil && info.DType != safetensors.F8E4M3 {
				return false, fmt.Errorf("quant: quantization_config quantizes %q, but its weight is stored as %s, not F8_E4M3", part, info.DType)
			}
			if scheme == nil && info.DType == safetensors.F8E4M3 {
				return false, fmt.Errorf("quant: %q is stored as F8_E4M3, but quantization_config does not quantize it", part)
			}
		}
	}
	if len(fp8) > 0 && len(dense) > 0 {
		return false, fmt.Errorf("quant: fused layer %s mixes FP8 parts %q with unquantized parts %q", src.Name, fp8, dense)
	}
	return len(fp8) > 0, nil
}

// quantizeAtLoad reads float weights, concatenates the parts and quantizes them.
func (o Options) quantizeAtLoad(src *modelcore.LinearSource) (*FP8Linear, error) {
	total := 0
	for _, out := range src.OutFeatures {
		total += out
	}
	w := make([]float32, 0, total*src.InFeatures)
	for i, part := range src.Parts {
		values, err := readFloat32s(src.Checkpoint, part+".weight", src.OutFeatures[i], src.InFeatures)
		if err != nil {
			return nil, err
		}
		w = append(w, values...)
	}
	q, scales, err := quantizeWeight(w, total, src.InFeatures, o.Strategy)
	if err != nil {
		return nil, fmt.Errorf("quant: quantizing %s: %w", src.Name, err)
	}
	var inputScale float32
	if o.Calibration != nil {
		if inputScale, err = o.Calibration.InputScale(src.Name); err != nil {
			return nil, err
		}
	}
	return NewFP8Linear(src.Backend, q, total, src.InFeatures, scales, inputScale)
}

// fp8Part is one checkpoint module of a fused FP8 layer.
type fp8Part struct {
	weight     []uint8
	strategy   Strategy
	scales     []float32 // one (per tensor) or one per row (per channel)
	inputScale float32   // 0 when the module has none
}

// loadFP8 reads the parts of a compressed-tensors layer and fuses them: per-channel
// scales concatenate; if every part has a per-tensor scale, parts are requantized to the
// largest (vLLM's rule), and otherwise per-tensor parts become per-channel; the input
// scale is the largest of the parts' (vLLM's rule), unless a calibration overrides it.
func (o Options) loadFP8(src *modelcore.LinearSource) (*FP8Linear, error) {
	parts := make([]fp8Part, len(src.Parts))
	perTensor, withInput := 0, 0
	for i, name := range src.Parts {
		p, err := o.readFP8Part(src, name, src.OutFeatures[i])
		if err != nil {
			return nil, err
		}
		parts[i] = p
		if p.strategy == StrategyTensor {
			perTensor++
		}
		if p.inputScale != 0 {
			withInput++
		}
	}
	if withInput != 0 && withInput != len(parts) {
		return nil, fmt.Errorf("quant: fused layer %s: %d of its %d parts have an input_scale", src.Name, withInput, len(parts))
	}
	var weight []uint8
	var scales []float32
	var inputScale float32
	if perTensor == len(parts) {
		shared := parts[0].scales[0]
		for _, p := range parts {
			shared = max(shared, p.scales[0])
		}
		for _, p := range parts {
			requantize(p.weight, p.scales[0], shared)
			weight = append(weight, p.weight...)
		}
		scales = []float32{shared}
	} else {
		for i, p := range parts {
			weight = append(weight, p.weight...)
			for range src.OutFeatures[i] / len(p.scales) {
				scales = append(scales, p.scales...) // A per-tensor part repeats its one scale.
			}
		}
	}
	for _, p := range parts {
		inputScale = max(inputScale, p.inputScale)
	}
	if o.Calibration != nil {
		var err error
		if inputScale, err = o.Calibration.InputScale(src.Name); err != nil {
			return nil, err
		}
	}
	return NewFP8Linear(src.Backend, weight, len(weight)/src.InFeatures, src.InFeatures, scales, inputScale)
}

// readFP8Part reads one module's F8_E4M3 weight [out, in], its weight_scale and its
// optional input_scale, checking shapes (and the quantization_config, when known).
func (o Options) readFP8Part(src *modelcore.LinearSource, name string, out int) (fp8Part, error) {
	ckpt := src.Checkpoint
	_, raw, err := ckpt.Raw(name+".weight", out, src.InFeatures)
	if err != nil {
		return fp8Part{}, fmt.Errorf("quant: %w", err)
	}
	p := fp8Part{weight: slices.Clone(raw)} // Raw is a read-only view of the file.
	if err := checkFiniteBytes(p.weight); err != nil {
		return fp8Part{}, fmt.Errorf("quant: tensor %q: %w", name+".weight", err)
	}
	var scheme *ConfigGroup
	if o.Checkpoint != nil {
		scheme = o.Checkpoint.Scheme(name)
	}

	scaleName := name + ".weight_scale"
	if !ckpt.Has(scaleName) {
		return fp8Part{}, fmt.Errorf("quant: missing tensor %q (the FP8 weight %q needs its scale)", scaleName, name+".weight")
	}
	info, err := ckpt.Info(scaleName)
	if err != nil {
		return fp8Part{}, fmt.Errorf("quant: %w", err)
	}
	switch {
	case slices.Equal(info.Shape, []int{}) || slices.Equal(info.Shape, []int{1}):
		p.strategy = StrategyTensor
	case slices.Equal(info.Shape, []int{out, 1}) || slices.Equal(info.Shape, []int{out}):
		p.strategy = StrategyChannel
	default:
		return fp8Part{}, fmt.Errorf("quant: tensor %q has shape %v, want [1] (per tensor) or [%d, 1] (per channel)",
			scaleName, info.Shape, out)
	}
	if scheme != nil && scheme.Weights.strategy() != p.strategy && out != 1 {
		return fp8Part{}, fmt.Errorf("quant: tensor %q has shape %v, but quantization_config says strategy %q",
			scaleName, info.Shape, scheme.Weights.strategy())
	}
	if p.scales, err = readScales(ckpt, scaleName); err != nil {
		return fp8Part{}, err
	}

	inputName := name + ".input_scale"
	switch {
	case ckpt.Has(inputName):
		if scheme != nil && scheme.InputActivations == nil {
			return fp8Part{}, fmt.Errorf("quant: tensor %q is present, but quantization_config has no input_activations", inputName)
		}
		info, err := ckpt.Info(inputName)
		if err != nil {
			return fp8Part{}, fmt.Errorf("quant: %w", err)
		}
		if len(info.Shape) > 1 || info.NumElements() != 1 {
			return fp8Part{}, fmt.Errorf("quant: tensor %q has shape %v, want [1] (static per-tensor input scale)", inputName, info.Shape)
		}
		scales, err := readScales(ckpt, inputName)
		if err != nil {
			return fp8Part{}, err
		}
		p.inputScale = scales[0]
	case scheme != nil && scheme.InputActivations != nil:
		return fp8Part{}, fmt.Errorf("quant: missing tensor %q (quantization_config has static input_activations)", inputName)
	}
	return p, nil
}

// readFloat32s reads a float tensor of the given dimensions (any, when none) as float32,
// through Raw so that load progress counts it.
func readFloat32s(ckpt *modelcore.CheckpointReader, name string, dims ...int) ([]float32, error) {
	info, raw, err := ckpt.Raw(name, dims...)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	switch info.DType {
	case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16:
	default:
		return nil, fmt.Errorf("quant: tensor %q has dtype %s, want F32, BF16, F16 or F64", name, info.DType)
	}
	values, err := safetensors.DecodeFloat32s(info.DType, raw)
	if err != nil {
		return nil, fmt.Errorf("quant: tensor %q: %w", name, err)
	}
	return values, nil
}

// readScales reads a float scale tensor and checks that its values are positive and finite.
func readScales(ckpt *modelcore.CheckpointReader, name string) ([]float32, error) {
	values, err := readFloat32s(ckpt, name)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, s := range values {
		if err := checkScale(s); err != nil {
			errs = append(errs, fmt.Errorf("element %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("quant: tensor %q: %w", name, err)
	}
	return values, nil
}
