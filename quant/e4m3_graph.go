package quant

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/support/exceptions"

	"github.com/blockdiff/blockdiff/internal/kernels"
)

// DecodeE4M3Node decodes FP8 E4M3FN bytes inside a graph, exactly, optionally times a scale.
// It is the recommended decoder, [DecodeE4M3NodeLUT] (the faster of the two where both
// were measured); [DecodeE4M3NodeBits] gives the same bits. See DecodeE4M3NodeBits for
// the arguments and shapes.
func DecodeE4M3Node(x *graph.Node, dtype dtypes.DType, scale *graph.Node) *graph.Node {
	return DecodeE4M3NodeLUT(x, dtype, scale)
}

// DecodeE4M3NodeBits decodes FP8 E4M3FN bytes with integer and bit operations: it builds
// the bit pattern of the value in the output format and bitcasts it. It uses only
// elementwise operations (bitwise and/or, shift, add, compare, select, dtype conversion,
// bitcast) and no table.
//
// Arguments and shapes:
//
//   - x: uint8, any shape [d_0, …, d_{n-1}], one E4M3FN byte per element.
//   - dtype: the output dtype, one of BFloat16, Float16, Float32, Float64. Every E4M3FN
//     value is exactly representable in each, so without a scale the result is exact:
//     bytes 0x7f/0xff give a quiet NaN with the byte's sign (bits 0x7fc0 for bfloat16,
//     0x7e00 for float16, 0x7fc00000 for float32, 0x7ff8000000000000 for float64),
//     0x80 gives -0.
//   - scale: nil for none, or a float tensor that broadcasts to x's shape by NumPy rules
//     (aligned on the right, each axis 1 or equal): a scalar for a per-tensor scale;
//     for per-output-channel scales of a weight stored [out, in] (the PyTorch and
//     compressed-tensors layout) shape [out, 1]; of a weight stored [in, out] shape [out]
//     or [1, out]. The scale is converted to float32 (float64 when dtype is Float64), the
//     product computed in that dtype and rounded once to dtype, to nearest even.
//
// It returns a tensor of x's shape and dtype. It panics (as graph functions do) if x is
// not uint8, dtype is unsupported, or scale is not a float tensor that broadcasts.
func DecodeE4M3NodeBits(x *graph.Node, dtype dtypes.DType, scale *graph.Node) *graph.Node {
	return decodeE4M3Node("DecodeE4M3NodeBits", x, dtype, scale, decodeBits)
}

// DecodeE4M3NodeLUT decodes FP8 E4M3FN bytes with a 256-entry table of dtype values
// (a graph constant: the values of [E4M3DecodeTable] in dtype) and a Gather indexed by
// the bytes. Its arguments, shapes, result and exactness are those of
// [DecodeE4M3NodeBits], bit for bit.
func DecodeE4M3NodeLUT(x *graph.Node, dtype dtypes.DType, scale *graph.Node) *graph.Node {
	return decodeE4M3Node("DecodeE4M3NodeLUT", x, dtype, scale, decodeLUT)
}

// decodeE4M3Node checks the arguments, decodes x to dtype (or, with a scale, to the
// compute dtype), and applies the scale.
func decodeE4M3Node(name string, x *graph.Node, dtype dtypes.DType, scale *graph.Node,
	decode func(x *graph.Node, dtype dtypes.DType) *graph.Node) *graph.Node {
	if x.DType() != dtypes.Uint8 {
		exceptions.Panicf("quant.%s: x must be uint8 (FP8 E4M3FN bytes), got shape %s", name, x.Shape())
	}
	if _, ok := floatLayouts[dtype]; !ok {
		exceptions.Panicf("quant.%s: output dtype must be BFloat16, Float16, Float32 or Float64, got %s", name, dtype)
	}
	if scale == nil {
		return decode(x, dtype)
	}
	if !scale.DType().IsFloat() {
		exceptions.Panicf("quant.%s: scale must be a float tensor, got shape %s", name, scale.Shape())
	}
	computeDType := dtypes.Float32
	if dtype == dtypes.Float64 {
		computeDType = dtypes.Float64
	}
	values := decode(x, computeDType)
	scale = broadcastScale(name, graph.ConvertDType(scale, computeDType), x.Shape())
	return graph.ConvertDType(graph.Mul(values, scale), dtype)
}

// broadcastScale broadcasts scale to target's dimensions by NumPy rules, or panics.
func broadcastScale(name string, scale *graph.Node, target shapes.Shape) *graph.Node {
	if scale.IsScalar() {
		return scale // Scalars broadcast in binary operations on every backend.
	}
	ok := scale.Rank() <= target.Rank()
	for i := 1; ok && i <= scale.Rank(); i++ {
		dim := scale.Shape().Dim(-i)
		ok = dim == 1 || dim == target.Dim(-i)
	}
	if !ok {
		exceptions.Panicf("quant.%s: scale shape %s does not broadcast to x's dimensions %v",
			name, scale.Shape(), target.Dimensions)
	}
	scale = graph.ExpandLeftToRank(scale, target.Rank())
	if scale.Shape().Equal(shapes.Make(scale.DType(), target.Dimensions...)) {
		return scale
	}
	return graph.BroadcastToDims(scale, target.Dimensions...)
}

// floatLayout describes an IEEE binary float format: the unsigned integer dtype of the
// same width, and its exponent bias and mantissa width.
type floatLayout struct {
	bitsDType dtypes.DType // Unsigned integer dtype of the same width.
	width     int          // Total bits.
	mantBits  int          // Explicit mantissa bits.
	bias      int          // Exponent bias.
	quietNaN  uint64       // Positive quiet NaN bit pattern.
}

// floatLayouts lists the output dtypes the decoders support.
var floatLayouts = map[dtypes.DType]floatLayout{
	dtypes.BFloat16: {dtypes.Uint16, 16, 7, 127, 0x7fc0},
	dtypes.Float16:  {dtypes.Uint16, 16, 10, 15, 0x7e00},
	dtypes.Float32:  {dtypes.Uint32, 32, 23, 127, 0x7fc00000},
	dtypes.Float64:  {dtypes.Uint64, 64, 52, 1023, 0x7ff8000000000000},
}

// valueBits returns the bit pattern, in this layout, of the value of E4M3FN byte b
// (the quiet NaN with b's sign for 0x7f and 0xff). It repacks the exact float64 value.
func (l floatLayout) valueBits(b uint8) uint64 {
	sign := uint64(b>>7) << (l.width - 1)
	v := float64(e4m3Table[b])
	switch {
	case math.IsNaN(v):
		return sign | l.quietNaN
	case v == 0:
		return sign
	}
	bits := math.Float64bits(math.Abs(v))
	exp := int(bits>>52) - 1023 + l.bias
	mant := (bits & (1<<52 - 1)) >> (52 - l.mantBits) // Exact: E4M3 values have 4 significant bits.
	return sign | uint64(exp)<<l.mantBits | mant
}

// constBits returns a graph constant of the layout's unsigned dtype: a scalar with
// value v when n is 0, else the vector [f(0), …, f(n-1)].
func (l floatLayout) constBits(g *graph.Graph, n int, v uint64, f func(i int) uint64) *graph.Node {
	switch l.bitsDType {
	case dtypes.Uint16:
		return constOf[uint16](g, n, v, f)
	case dtypes.Uint32:
		return constOf[uint32](g, n, v, f)
	default:
		return constOf[uint64](g, n, v, f)
	}
}

// constOf implements floatLayout.constBits for one unsigned type.
func constOf[T uint16 | uint32 | uint64](g *graph.Graph, n int, v uint64, f func(i int) uint64) *graph.Node {
	if n == 0 {
		return graph.Const(g, T(v))
	}
	values := make([]T, n)
	for i := range values {
		values[i] = T(f(i))
	}
	return graph.Const(g, values)
}

// decodeBits is the bit-manipulation decoder, for a supported dtype, without scale.
//
// With mag = b & 0x7f = exponent<<3 | mantissa, a normal E4M3 value 2^(e-7)·(1+m/8) has
// the target bit pattern (mag << (mantBits-3)) + ((bias-7) << mantBits). A subnormal
// (e = 0) is m·2^-9: converting the small integer m to the float dtype and multiplying
// by 2^-9 is exact and produces a normal number, so no backend's denormal flushing can
// touch it. Sign and NaN are then set on the integer pattern, which is bitcast last.
// Constants are graph.Const nodes, never the graph's cached scalars, so the decoder may
// be used inside While-loop closures.
func decodeBits(x *graph.Node, dtype dtypes.DType) *graph.Node {
	g := x.Graph()
	layout := floatLayouts[dtype]
	u := layout.bitsDType
	bytes := func(v uint8) *graph.Node { return graph.Const(g, v) }
	word := func(v uint64) *graph.Node { return layout.constBits(g, 0, v, nil) }

	mag := graph.BitwiseAnd(x, bytes(0x7f))
	wideMag := graph.ConvertDType(mag, u)
	normal := graph.Add(
		graph.BitwiseShiftLeft(wideMag, word(uint64(layout.mantBits-3))),
		word(uint64(layout.bias-7)<<layout.mantBits))
	subnormalValue := graph.Mul(
		graph.ConvertDType(graph.BitwiseAnd(mag, bytes(7)), dtype),
		graph.Bitcast(word(uint64(layout.bias-9)<<layout.mantBits), dtype)) // 2^-9
	subnormal := graph.Bitcast(subnormalValue, u)
	bits := graph.Where(graph.LessThan(mag, bytes(8)), subnormal, normal)
	bits = graph.Where(graph.Equal(mag, bytes(E4M3NaN)), word(layout.quietNaN), bits)
	sign := graph.BitwiseShiftLeft(
		graph.ConvertDType(graph.BitwiseAnd(x, bytes(0x80)), u),
		word(uint64(layout.width-8)))
	return graph.Bitcast(graph.BitwiseOr(bits, sign), dtype)
}

// decodeLUT is the table-and-Gather decoder, for a supported dtype, without scale.
func decodeLUT(x *graph.Node, dtype dtypes.DType) *graph.Node {
	g := x.Graph()
	layout := floatLayouts[dtype]
	table := graph.Bitcast(layout.constBits(g, 256, 0, func(i int) uint64 {
		return layout.valueBits(uint8(i))
	}), dtype)
	indices := graph.ExpandAxes(graph.ConvertDType(x, dtypes.Int32), -1)
	values := graph.Gather(table, indices)
	kernels.Mark(g, kernels.E4M3Decoded{Values: kernels.Value(values), Bytes: kernels.Value(x)})
	return values
}
