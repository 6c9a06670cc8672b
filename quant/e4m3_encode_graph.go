package quant

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/support/exceptions"
)

// EncodeE4M3Node rounds the values of x to FP8 E4M3FN inside a graph and returns their
// bytes as uint8, of x's shape: element for element the byte [EncodeE4M3] returns for
// float32(v), in the same saturate mode, bit for bit.
//
// x must be BFloat16, Float16, Float32 or Float64; it is first converted to float32
// (exact, except for Float64, which is rounded once to float32 as EncodeE4M3's argument
// would be). Like the decoders it uses only operations both backends support: bitwise
// and/or, logical shifts, integer add and compare, select, min/max, a float multiply by a
// power of two, round to nearest even, dtype conversion and bitcast. Its constants are
// [graph.Const] nodes, never the graph's cached scalars, so it may be used inside
// While-loop closures.
//
// It panics (as graph functions do) if x is not a float tensor of those dtypes.
func EncodeE4M3Node(x *graph.Node, saturate bool) *graph.Node {
	if _, ok := floatLayouts[x.DType()]; !ok {
		exceptions.Panicf("quant.EncodeE4M3Node: x must be BFloat16, Float16, Float32 or Float64, got shape %s", x.Shape())
	}
	g := x.Graph()
	word := func(v uint32) *graph.Node { return graph.Const(g, v) }
	octet := func(v uint8) *graph.Node { return graph.Const(g, v) }

	bits := graph.Bitcast(graph.ConvertDType(x, dtypes.Float32), dtypes.Uint32)
	abs := graph.BitwiseAnd(bits, word(0x7fffffff))
	sign := graph.ConvertDType(graph.BitwiseShiftRightLogical(bits, word(24)), dtypes.Uint8)
	sign = graph.BitwiseAnd(sign, octet(0x80))

	// Normal range [2^-6, 480): rebias the exponent and round the mantissa to 3 bits,
	// to nearest even, as EncodeE4M3 does. The magnitude is clamped into the range first
	// so that no lane wraps around or overflows a byte; lanes outside are replaced below.
	n := graph.Min(graph.Max(abs, word(f32AbsMinNormal)), word(f32Abs480-1))
	n = graph.Sub(n, word(e4m3RebiasF32))
	odd := graph.BitwiseAnd(graph.BitwiseShiftRightLogical(n, word(20)), word(1))
	n = graph.BitwiseShiftRightLogical(graph.Add(graph.Add(n, word(0x7ffff)), odd), word(20))
	normal := graph.ConvertDType(n, dtypes.Uint8) // In [0x08, 0x7f]; 0x7f only for (464, 480).
	if saturate {
		normal = graph.Min(normal, octet(0x7e))
	}

	// Below 2^-6: a multiple of 2^-9, round(|v| × 2^9) to nearest even, in [0, 8]. The
	// product is exact (a power of two) and a normal float32 for every clamped magnitude
	// that does not round to zero anyway.
	small := graph.Bitcast(graph.Min(abs, word(f32AbsMinNormal)), dtypes.Float32)
	subnormal := graph.ConvertDType(graph.Round(graph.Mul(small, graph.Const(g, float32(512)))), dtypes.Uint8)

	out := graph.Where(graph.GreaterOrEqual(abs, word(f32AbsMinNormal)), normal, subnormal)
	overflow := E4M3NaN
	if saturate {
		overflow = 0x7e
	}
	out = graph.Where(graph.GreaterOrEqual(abs, word(f32Abs480)), octet(overflow), out)
	out = graph.Where(graph.GreaterThan(abs, word(f32AbsInf)), octet(E4M3NaN), out)
	return graph.BitwiseOr(out, sign)
}

// quantizeDequantizeE4M3Node returns the E4M3FN values (unscaled, exact in dtype) of
// x/scale rounded with saturation: x [..., n] of any float dtype, scale a float32
// scalar node. The caller multiplies by the scale, usually after a matrix product.
func quantizeDequantizeE4M3Node(x, scale *graph.Node, dtype dtypes.DType) *graph.Node {
	scaled := graph.Div(graph.ConvertDType(x, dtypes.Float32), graph.ConvertDType(scale, dtypes.Float32))
	return DecodeE4M3Node(EncodeE4M3Node(scaled, true), dtype, nil)
}
