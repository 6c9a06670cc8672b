package quant

import "fmt"

// Strategy is the granularity of weight scales, named as in compressed-tensors'
// quantization arguments.
type Strategy string

// The supported weight-scale strategies.
const (
	// StrategyChannel gives each output channel (row of the [out, in] weight) its own
	// scale. It is the default: more accurate, for 4 bytes per output feature.
	StrategyChannel Strategy = "channel"
	// StrategyTensor gives the whole (possibly fused) weight one scale.
	StrategyTensor Strategy = "tensor"
)

// orDefault returns s, or StrategyChannel for the zero value.
func (s Strategy) orDefault() Strategy {
	if s == "" {
		return StrategyChannel
	}
	return s
}

// validate rejects strategies other than tensor and channel (and the zero value).
func (s Strategy) validate() error {
	switch s {
	case "", StrategyChannel, StrategyTensor:
		return nil
	}
	return fmt.Errorf("quant: unsupported weight strategy %q (supported: %q, %q)", string(s), StrategyChannel, StrategyTensor)
}

// Options configure FP8 quantization. The zero value is ready to use: per-channel weight
// scales, no activation quantization, lm_head left in the compute dtype.
//
// Options is a [model.LinearLoader], for model.LoadOptions.Linear: linear layers stored
// as F8_E4M3 in the checkpoint (compressed-tensors) load as [FP8Linear] with their
// scales; layers stored in a float dtype are quantized at load time. Embeddings, norms
// and attention always stay in the compute dtype.
type Options struct {
	// Strategy is the granularity of the weight scales of layers quantized here (at load
	// time, or by [QuantizeModel]): StrategyChannel (the default, for the zero value) or
	// StrategyTensor. For a fused layer (q/k/v, gate/up) per-channel scales are simply
	// those of its rows; a per-tensor scale covers all its parts, so it is the largest of
	// the parts' scales. Layers read from an FP8 checkpoint keep the checkpoint's scales.
	Strategy Strategy
	// Calibration, when set, gives every quantized layer a static input scale,
	// [ScaleFromAmax] of the layer's calibrated input_amax, overriding any input scale an
	// FP8 checkpoint holds; a quantized layer the calibration lacks is an error. Nil (the
	// default) quantizes activations only where an FP8 checkpoint has input scales.
	Calibration *Calibration
	// QuantizeHead quantizes lm_head too. By default a head stored unquantized stays in
	// the compute dtype (as compressed-tensors' usual ignore: ["lm_head"] has it); one
	// stored as FP8 loads as FP8. A head tied to the embeddings is never loaded through a
	// [model.LinearLoader]: only [QuantizeModel] quantizes it, from a copy of the
	// embedding.
	QuantizeHead bool
	// Checkpoint is the quantization_config of the checkpoint being loaded, if it has one
	// ([ReadQuantizationConfig]; [Load] sets it). Then every module it quantizes must be
	// stored as FP8 with the scales it describes, and the others stay in the compute dtype
	// (except lm_head with QuantizeHead). Nil infers everything from the tensors: F8_E4M3
	// weights load as FP8, float weights are quantized at load.
	Checkpoint *QuantizationConfig
	// Decoder is the in-graph weight decoder of the FP8 layers (default DecoderLUT).
	Decoder Decoder
}
