package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/kernels"
	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// FP8Linear is a linear layer y = x·Wᵀ whose weight is stored as FP8 E4M3FN bytes with
// float32 scales, optionally with a static scale that quantizes its input to FP8 too
// (W8A8). It implements [modelcore.Linear].
//
// The weight value of element [o, i] is DecodeE4M3(Weight[o, i]) × scale, where the scale
// is WeightScale (per tensor) or WeightScale[o] (per output channel).
//
// Apply computes, in the graph:
//
//   - with an input scale s: the activation x/s, rounded to E4M3 with saturation (ties to
//     even; [EncodeE4M3Node]), decoded to x's dtype without scale;
//   - the weight bytes decoded to x's dtype without scale ([DecodeE4M3Node]);
//   - their product, then times s × weight scale (a scalar, or a vector over the output
//     features) in float32, converted back to x's dtype.
//
// So the matrix product multiplies exact E4M3 values, as an FP8 GEMM does, and the scales
// are applied once to the product. Applying the per-channel scale to the output costs
// tokens × out multiplications, folding it into the decoded weight out × in: the output is
// the smaller of the two whenever fewer tokens than input features go through the layer,
// which is every decode step, and the decoded weight stays exact (no rounding of
// value × scale to bfloat16). No float8 dtype appears in the graph: the bytes travel as
// uint8.
type FP8Linear struct {
	// Weight holds the E4M3FN bytes, uint8 [out, in].
	Weight *tensors.Tensor
	// WeightScale is float32: a scalar (per-tensor scale) or [out] (per-output-channel).
	WeightScale *tensors.Tensor
	// InputScale is the static activation scale, a float32 scalar; nil when activations
	// are not quantized (weight-only FP8).
	InputScale *tensors.Tensor
	// Decoder picks the in-graph weight decoder (the zero value: DecoderLUT).
	Decoder Decoder
}

// Decoder names an in-graph decoder of FP8 weights. Both give the same bits; which is
// faster depends on the backend (on the Go backend they cost about the same, 8-9 ns per
// element, the bit operations some 10% less).
type Decoder int

const (
	// DecoderLUT decodes with [DecodeE4M3NodeLUT]: a 256-entry table and a Gather.
	DecoderLUT Decoder = iota
	// DecoderBits decodes with [DecodeE4M3NodeBits]: elementwise integer operations
	// only, which a compiler such as XLA may fuse into the matrix product's operand.
	DecoderBits
)

// decode decodes FP8 bytes to dtype without scale.
func (d Decoder) decode(x *graph.Node, dtype dtypes.DType) *graph.Node {
	if d == DecoderBits {
		return DecodeE4M3NodeBits(x, dtype, nil)
	}
	return DecodeE4M3NodeLUT(x, dtype, nil)
}

var _ modelcore.Linear = (*FP8Linear)(nil)

// NewFP8Linear puts an FP8 layer on the backend's device: weight holds out×in E4M3FN
// bytes, row-major [out, in]; weightScales holds one scale (per tensor) or out scales
// (per output channel); inputScale is the static activation scale, or 0 for none.
// Scales must be positive and finite.
func NewFP8Linear(backend compute.Backend, weight []uint8, out, in int, weightScales []float32, inputScale float32) (*FP8Linear, error) {
	if out <= 0 || in <= 0 {
		return nil, fmt.Errorf("quant: FP8 layer needs positive sizes, got [%d, %d]", out, in)
	}
	if len(weight) != out*in {
		return nil, fmt.Errorf("quant: FP8 weight [%d, %d] needs %d bytes, got %d", out, in, out*in, len(weight))
	}
	if len(weightScales) != 1 && len(weightScales) != out {
		return nil, fmt.Errorf("quant: FP8 weight [%d, %d] needs 1 or %d scales, got %d", out, in, out, len(weightScales))
	}
	for i, s := range weightScales {
		if err := checkScale(s); err != nil {
			return nil, fmt.Errorf("quant: weight scale %d: %w", i, err)
		}
	}
	if inputScale != 0 {
		if err := checkScale(inputScale); err != nil {
			return nil, fmt.Errorf("quant: input scale: %w", err)
		}
	}
	l := &FP8Linear{}
	var err error
	if l.Weight, err = tensors.FromRaw(backend, 0, shapes.Make(dtypes.Uint8, out, in), weight); err != nil {
		return nil, fmt.Errorf("quant: uploading FP8 weight: %w", err)
	}
	scaleDims := []int{out}
	if len(weightScales) == 1 {
		scaleDims = nil
	}
	if l.WeightScale, err = uploadFloat32s(backend, weightScales, scaleDims...); err == nil && inputScale != 0 {
		l.InputScale, err = uploadFloat32s(backend, []float32{inputScale})
	}
	if err != nil {
		_ = l.free()
		return nil, err
	}
	return l, nil
}

// checkScale rejects a scale that is not a positive finite number.
func checkScale(s float32) error {
	if !(s > 0) || math.IsInf(float64(s), 1) {
		return fmt.Errorf("scale must be a positive finite number, got %g", s)
	}
	return nil
}

// uploadFloat32s puts float32 values of the given dimensions (none: a scalar) on the device.
func uploadFloat32s(backend compute.Backend, values []float32, dims ...int) (*tensors.Tensor, error) {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	t, err := tensors.FromRaw(backend, 0, shapes.Make(dtypes.Float32, dims...), data)
	if err != nil {
		return nil, fmt.Errorf("quant: uploading scales: %w", err)
	}
	return t, nil
}

// Params implements [modelcore.Linear]: the weight, its scale, then the input scale if any.
func (l *FP8Linear) Params() []*tensors.Tensor {
	if l.InputScale == nil {
		return []*tensors.Tensor{l.Weight, l.WeightScale}
	}
	return []*tensors.Tensor{l.Weight, l.WeightScale, l.InputScale}
}

// Apply implements [modelcore.Linear]: x [..., in] to [..., out] in x's dtype.
func (l *FP8Linear) Apply(x *graph.Node, params []*graph.Node) *graph.Node {
	return graph.ConvertDType(l.ApplyFloat32(x, params), x.DType())
}

// ApplyFloat32 implements modelcore.Float32Linear: x [..., in] to [..., out] in float32,
// scaled before any rounding.
func (l *FP8Linear) ApplyFloat32(x *graph.Node, params []*graph.Node) *graph.Node {
	dtype := x.DType()
	weight, scale := params[0], params[1]
	if len(params) > 2 {
		inputScale := params[2]
		x = quantizeDequantizeE4M3Node(x, inputScale, dtype)
		scale = graph.Mul(scale, inputScale)
	}
	w := l.Decoder.decode(weight, dtype)
	dot := graph.Dot(x, w)
	if dtype.IsHalfPrecision() {
		dot = dot.WithOutputDType(dtypes.Float32)
	}
	y := graph.ConvertDType(dot.General([]int{x.Rank() - 1}, nil, []int{1}, nil), dtypes.Float32)
	factor := scale
	if !scale.IsScalar() {
		dims := make([]int, y.Rank())
		for i := range dims {
			dims[i] = 1
		}
		dims[len(dims)-1] = scale.Shape().Dimensions[0]
		factor = graph.BroadcastToDims(graph.Reshape(scale, dims...), y.Shape().Dimensions...)
	}
	kernels.Mark(y.Graph(), kernels.FP8Dense{Product: kernels.Value(y), Scale: kernels.Value(scale), Factor: kernels.Value(factor)})
	return graph.Mul(y, factor)
}

// InFeatures implements [modelcore.Linear].
func (l *FP8Linear) InFeatures() int { return l.Weight.Shape().Dimensions[1] }

// OutFeatures implements [modelcore.Linear].
func (l *FP8Linear) OutFeatures() int { return l.Weight.Shape().Dimensions[0] }

// Strategy reports the granularity of the weight scale: [StrategyTensor] or
// [StrategyChannel].
func (l *FP8Linear) Strategy() Strategy {
	if l.WeightScale.Shape().IsScalar() {
		return StrategyTensor
	}
	return StrategyChannel
}

// Bytes returns the device memory of the layer's tensors.
func (l *FP8Linear) Bytes() int64 {
	var n int64
	for _, t := range l.Params() {
		n += t.Shape().ByteSize()
	}
	return n
}

// Host reads the layer back from the device: the weight bytes [out, in] row-major, the
// weight scales (one, or one per output channel) and the input scale (0 when none).
func (l *FP8Linear) Host() (weight []uint8, weightScales []float32, inputScale float32, err error) {
	if weight, err = tensors.CopyFlatData[uint8](l.Weight); err != nil {
		return nil, nil, 0, fmt.Errorf("quant: reading FP8 weight: %w", err)
	}
	if weightScales, err = tensors.CopyFlatData[float32](l.WeightScale); err != nil {
		return nil, nil, 0, fmt.Errorf("quant: reading weight scale: %w", err)
	}
	if l.InputScale != nil {
		s, err := tensors.CopyFlatData[float32](l.InputScale)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("quant: reading input scale: %w", err)
		}
		inputScale = s[0]
	}
	return weight, weightScales, inputScale, nil
}

// free releases the layer's device memory.
func (l *FP8Linear) free() error {
	var first error
	for _, t := range []*tensors.Tensor{l.Weight, l.WeightScale, l.InputScale} {
		if t != nil {
			if err := t.FinalizeAll(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
