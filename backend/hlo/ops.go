//go:build cgo && !noxla

package hlo

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapeinference"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types"
)

// This file holds the element-wise and shape operations: each one StableHLO op, with
// GoMLX's implicit broadcasting made explicit (StableHLO has none).

// opError wraps err with the operation's name.
func opError(op compute.OpType, err error) error { return fmt.Errorf("hlo: %s: %w", op, err) }

// result wraps the output of a StableHLO op, or its error.
func (f *Function) result(op compute.OpType, v *stablehlo.Value, err error) (compute.Value, error) {
	if err != nil {
		return nil, opError(op, err)
	}
	return f.wrap(v), nil
}

// broadcastTo broadcasts v (a scalar, or of the same rank with dimensions 1 or equal)
// to dims, keeping its dtype.
func broadcastTo(v *stablehlo.Value, dims []int) (*stablehlo.Value, error) {
	s := fromXLA(v.Shape())
	if slices.Equal(s.Dimensions, dims) {
		return v, nil
	}
	target := shapes.Make(s.DType, dims...)
	axes := make([]int, s.Rank())
	for i := range axes {
		axes[i] = i // a scalar has none; otherwise the ranks match
	}
	return stablehlo.BroadcastInDim(v, toXLA(target), axes)
}

// unary applies a one-operand StableHLO op.
func (f *Function) unary(op compute.OpType, apply func(*stablehlo.Value) (*stablehlo.Value, error), x compute.Value) (compute.Value, error) {
	vs, err := f.operands(x)
	if err != nil {
		return nil, opError(op, err)
	}
	v, err := apply(vs[0])
	out, err := f.result(op, v, err)
	if err == nil {
		f.recordOperand(out, op, x)
	}
	return out, err
}

// binary applies a two-operand StableHLO op after broadcasting both to the output shape.
func (f *Function) binary(op compute.OpType, apply func(lhs, rhs *stablehlo.Value) (*stablehlo.Value, error), lhs, rhs compute.Value) (compute.Value, error) {
	vs, err := f.operands(lhs, rhs)
	if err != nil {
		return nil, opError(op, err)
	}
	out, err := shapeinference.BinaryOp(op, fromXLA(vs[0].Shape()), fromXLA(vs[1].Shape()))
	if err != nil {
		return nil, opError(op, err)
	}
	return f.broadcastApply(op, out.Dimensions, vs, func(b []*stablehlo.Value) (*stablehlo.Value, error) {
		return apply(b[0], b[1])
	})
}

// broadcastApply broadcasts vs to dims and applies apply to them.
func (f *Function) broadcastApply(op compute.OpType, dims []int, vs []*stablehlo.Value,
	apply func([]*stablehlo.Value) (*stablehlo.Value, error)) (compute.Value, error) {
	bs := make([]*stablehlo.Value, len(vs))
	for i, v := range vs {
		var err error
		if bs[i], err = broadcastTo(v, dims); err != nil {
			return nil, opError(op, err)
		}
	}
	v, err := apply(bs)
	return f.result(op, v, err)
}

// compare applies a comparison of direction dir, with TotalOrder for the *TotalOrder
// operations.
func (f *Function) compare(op compute.OpType, dir types.ComparisonDirection, totalOrder bool, lhs, rhs compute.Value) (compute.Value, error) {
	vs, err := f.operands(lhs, rhs)
	if err != nil {
		return nil, opError(op, err)
	}
	out, err := shapeinference.ComparisonOp(op, fromXLA(vs[0].Shape()), fromXLA(vs[1].Shape()))
	if err != nil {
		return nil, opError(op, err)
	}
	dtype := vs[0].Shape().DType
	kind := compareType(dtype)
	if totalOrder && dtype.IsFloat() {
		kind = types.CompareTotalOrder
	}
	return f.broadcastApply(op, out.Dimensions, vs, func(b []*stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Compare(b[0], b[1], dir, kind)
	})
}

// compareType is the StableHLO comparison type of dtype's values.
func compareType(dtype dtypes.DType) types.ComparisonType {
	switch {
	case dtype.IsFloat() || dtype.IsComplex():
		return types.CompareFloat
	case dtype.IsInt() && !dtype.IsUnsigned():
		return types.CompareSigned
	}
	return types.CompareUnsigned // unsigned integers and booleans
}

// Abs implements compute.StandardOps.
func (f *Function) Abs(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeAbs, stablehlo.Abs, x)
}

// Neg implements compute.StandardOps.
func (f *Function) Neg(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeNeg, stablehlo.Negate, x)
}

// Exp implements compute.StandardOps.
func (f *Function) Exp(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeExp, stablehlo.Exponential, x)
}

// Expm1 implements compute.StandardOps.
func (f *Function) Expm1(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeExpm1, stablehlo.ExponentialMinusOne, x)
}

// Log implements compute.StandardOps.
func (f *Function) Log(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeLog, stablehlo.Log, x)
}

// Log1p implements compute.StandardOps.
func (f *Function) Log1p(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeLog1p, stablehlo.LogPlusOne, x)
}

// Logistic implements compute.StandardOps.
func (f *Function) Logistic(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeLogistic, stablehlo.Logistic, x)
}

// Tanh implements compute.StandardOps.
func (f *Function) Tanh(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeTanh, stablehlo.Tanh, x)
}

// Sqrt implements compute.StandardOps.
func (f *Function) Sqrt(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeSqrt, stablehlo.Sqrt, x)
}

// Rsqrt implements compute.StandardOps.
func (f *Function) Rsqrt(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeRsqrt, stablehlo.Rsqrt, x)
}

// Sin implements compute.StandardOps.
func (f *Function) Sin(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeSin, stablehlo.Sine, x)
}

// Cos implements compute.StandardOps.
func (f *Function) Cos(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeCos, stablehlo.Cosine, x)
}

// Erf implements compute.StandardOps.
func (f *Function) Erf(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeErf, stablehlo.Erf, x)
}

// Floor implements compute.StandardOps.
func (f *Function) Floor(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeFloor, stablehlo.Floor, x)
}

// Ceil implements compute.StandardOps.
func (f *Function) Ceil(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeCeil, stablehlo.Ceil, x)
}

// Round implements compute.StandardOps: to the nearest, ties to even.
func (f *Function) Round(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeRound, stablehlo.RoundNearestEven, x)
}

// Sign implements compute.StandardOps.
func (f *Function) Sign(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeSign, stablehlo.Sign, x)
}

// IsFinite implements compute.StandardOps.
func (f *Function) IsFinite(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeIsFinite, stablehlo.IsFinite, x)
}

// IsNaN implements compute.StandardOps: NaN is the one value unequal to itself.
func (f *Function) IsNaN(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeIsNaN, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Compare(v, v, types.CompareNE, types.CompareFloat)
	}, x)
}

// LogicalNot implements compute.StandardOps.
func (f *Function) LogicalNot(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeLogicalNot, stablehlo.Not, x)
}

// BitwiseNot implements compute.StandardOps.
func (f *Function) BitwiseNot(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeBitwiseNot, stablehlo.Not, x)
}

// BitCount implements compute.StandardOps.
func (f *Function) BitCount(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeBitCount, stablehlo.Popcnt, x)
}

// Clz implements compute.StandardOps.
func (f *Function) Clz(x compute.Value) (compute.Value, error) {
	return f.unary(compute.OpTypeClz, stablehlo.CountLeadingZeros, x)
}

// Add implements compute.StandardOps. Where it completes a kernels.ResidualAdd, a fold
// kernel may compute it (residualProduct); else XLA adds, and the sum keeps its
// addends for the norm kernel after it (normedRows).
func (f *Function) Add(lhs, rhs compute.Value) (compute.Value, error) {
	r, ok := f.builder.completes(compute.OpTypeAdd, lhs, rhs).(*residualAdd)
	if !ok {
		return f.binary(compute.OpTypeAdd, stablehlo.Add, lhs, rhs)
	}
	if v, ok, err := f.residualProduct(r); ok {
		return v, err
	}
	out, err := f.binary(compute.OpTypeAdd, stablehlo.Add, lhs, rhs)
	if err == nil {
		out.(*value).known().addends = []*value{lhs.(*value), rhs.(*value)}
	}
	return out, err
}

// Sub implements compute.StandardOps.
func (f *Function) Sub(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeSub, stablehlo.Subtract, lhs, rhs)
}

// Mul implements compute.StandardOps. Where it completes a kernels.NormedDense or a
// kernels.FP8Dense, our kernels may compute it with the norm before it: one row's
// (normedProduct, normalisedProduct) or several rows' (normedRows); else XLA
// multiplies, and an FP8 layer's output keeps its product and scale for the fold kernel
// of the residual add after it (residualProduct).
func (f *Function) Mul(lhs, rhs compute.Value) (compute.Value, error) {
	switch r := f.builder.completes(compute.OpTypeMul, lhs, rhs).(type) {
	case *normedDense:
		if v, ok, err := f.normedProduct(r); ok {
			return v, err
		}
		if v, ok, err := f.normedRows(r); ok {
			return v, err
		}
	case *fp8Dense:
		if v, ok, err := f.normalisedProduct(r); ok {
			return v, err
		}
		if v, ok, err := f.normedRows(r); ok {
			return v, err
		}
		out, err := f.binary(compute.OpTypeMul, stablehlo.Multiply, lhs, rhs)
		if err == nil {
			out.(*value).known().fp8 = r
		}
		return out, err
	}
	return f.binary(compute.OpTypeMul, stablehlo.Multiply, lhs, rhs)
}

// Div implements compute.StandardOps.
func (f *Function) Div(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeDiv, stablehlo.Divide, lhs, rhs)
}

// Rem implements compute.StandardOps.
func (f *Function) Rem(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeRem, stablehlo.Remainder, lhs, rhs)
}

// Pow implements compute.StandardOps.
func (f *Function) Pow(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypePow, stablehlo.Power, lhs, rhs)
}

// Atan2 implements compute.StandardOps.
func (f *Function) Atan2(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeAtan2, stablehlo.Atan2, lhs, rhs)
}

// Max implements compute.StandardOps.
func (f *Function) Max(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeMax, stablehlo.Maximum, lhs, rhs)
}

// Min implements compute.StandardOps.
func (f *Function) Min(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeMin, stablehlo.Minimum, lhs, rhs)
}

// LogicalAnd implements compute.StandardOps.
func (f *Function) LogicalAnd(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeLogicalAnd, stablehlo.And, lhs, rhs)
}

// LogicalOr implements compute.StandardOps.
func (f *Function) LogicalOr(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeLogicalOr, stablehlo.Or, lhs, rhs)
}

// LogicalXor implements compute.StandardOps.
func (f *Function) LogicalXor(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeLogicalXor, stablehlo.Xor, lhs, rhs)
}

// BitwiseAnd implements compute.StandardOps.
func (f *Function) BitwiseAnd(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeBitwiseAnd, stablehlo.And, lhs, rhs)
}

// BitwiseOr implements compute.StandardOps.
func (f *Function) BitwiseOr(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeBitwiseOr, stablehlo.Or, lhs, rhs)
}

// BitwiseXor implements compute.StandardOps.
func (f *Function) BitwiseXor(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeBitwiseXor, stablehlo.Xor, lhs, rhs)
}

// ShiftLeft implements compute.StandardOps.
func (f *Function) ShiftLeft(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeShiftLeft, stablehlo.ShiftLeft, lhs, rhs)
}

// ShiftRightArithmetic implements compute.StandardOps.
func (f *Function) ShiftRightArithmetic(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeShiftRightArithmetic, stablehlo.ShiftRightArithmetic, lhs, rhs)
}

// ShiftRightLogical implements compute.StandardOps.
func (f *Function) ShiftRightLogical(lhs, rhs compute.Value) (compute.Value, error) {
	return f.binary(compute.OpTypeShiftRightLogical, stablehlo.ShiftRightLogical, lhs, rhs)
}

// Equal implements compute.StandardOps.
func (f *Function) Equal(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeEqual, types.CompareEQ, false, lhs, rhs)
}

// NotEqual implements compute.StandardOps.
func (f *Function) NotEqual(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeNotEqual, types.CompareNE, false, lhs, rhs)
}

// GreaterOrEqual implements compute.StandardOps.
func (f *Function) GreaterOrEqual(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeGreaterOrEqual, types.CompareGE, false, lhs, rhs)
}

// GreaterThan implements compute.StandardOps.
func (f *Function) GreaterThan(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeGreaterThan, types.CompareGT, false, lhs, rhs)
}

// LessOrEqual implements compute.StandardOps.
func (f *Function) LessOrEqual(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeLessOrEqual, types.CompareLE, false, lhs, rhs)
}

// LessThan implements compute.StandardOps.
func (f *Function) LessThan(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeLessThan, types.CompareLT, false, lhs, rhs)
}

// EqualTotalOrder implements compute.StandardOps.
func (f *Function) EqualTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeEqualTotalOrder, types.CompareEQ, true, lhs, rhs)
}

// NotEqualTotalOrder implements compute.StandardOps.
func (f *Function) NotEqualTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeNotEqualTotalOrder, types.CompareNE, true, lhs, rhs)
}

// GreaterOrEqualTotalOrder implements compute.StandardOps.
func (f *Function) GreaterOrEqualTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeGreaterOrEqualTotalOrder, types.CompareGE, true, lhs, rhs)
}

// GreaterThanTotalOrder implements compute.StandardOps.
func (f *Function) GreaterThanTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeGreaterThanTotalOrder, types.CompareGT, true, lhs, rhs)
}

// LessOrEqualTotalOrder implements compute.StandardOps.
func (f *Function) LessOrEqualTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeLessOrEqualTotalOrder, types.CompareLE, true, lhs, rhs)
}

// LessThanTotalOrder implements compute.StandardOps.
func (f *Function) LessThanTotalOrder(lhs, rhs compute.Value) (compute.Value, error) {
	return f.compare(compute.OpTypeLessThanTotalOrder, types.CompareLT, true, lhs, rhs)
}

// Where implements compute.StandardOps: the three operands broadcast to a common shape.
func (f *Function) Where(condition, onTrue, onFalse compute.Value) (compute.Value, error) {
	op := compute.OpTypeWhere
	vs, err := f.operands(condition, onTrue, onFalse)
	if err != nil {
		return nil, opError(op, err)
	}
	out, err := shapeinference.Where(fromXLA(vs[0].Shape()), fromXLA(vs[1].Shape()), fromXLA(vs[2].Shape()))
	if err != nil {
		return nil, opError(op, err)
	}
	v, err := f.broadcastApply(op, out.Dimensions, vs, func(b []*stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Select(b[0], b[1], b[2])
	})
	return v, err
}

// Clamp implements compute.StandardOps; StableHLO takes scalar or full-shape bounds too.
func (f *Function) Clamp(lo, x, hi compute.Value) (compute.Value, error) {
	vs, err := f.operands(lo, x, hi)
	if err != nil {
		return nil, opError(compute.OpTypeClamp, err)
	}
	v, err := stablehlo.Clamp(vs[0], vs[1], vs[2])
	return f.result(compute.OpTypeClamp, v, err)
}

// ConvertDType implements compute.StandardOps.
func (f *Function) ConvertDType(x compute.Value, dtype dtypes.DType) (compute.Value, error) {
	return f.unary(compute.OpTypeConvertDType, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		if v.Shape().DType == dtype {
			return v, nil
		}
		return stablehlo.Convert(v, dtype)
	}, x)
}

// Bitcast implements compute.StandardOps: StableHLO's bitcast_convert adds or removes
// the minor axis the same way.
func (f *Function) Bitcast(x compute.Value, dtype dtypes.DType) (compute.Value, error) {
	return f.unary(compute.OpTypeBitcast, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.BitcastConvert(v, dtype)
	}, x)
}

// Reshape implements compute.StandardOps.
func (f *Function) Reshape(x compute.Value, dims ...int) (compute.Value, error) {
	return f.unary(compute.OpTypeReshape, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Reshape(v, toXLA(shapes.Make(v.Shape().DType, dims...)))
	}, x)
}

// Transpose implements compute.StandardOps.
func (f *Function) Transpose(x compute.Value, permutation ...int) (compute.Value, error) {
	return f.unary(compute.OpTypeTranspose, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Transpose(v, permutation...)
	}, x)
}

// BroadcastInDim implements compute.StandardOps.
func (f *Function) BroadcastInDim(x compute.Value, outputShape shapes.Shape, broadcastAxes []int) (compute.Value, error) {
	return f.unary(compute.OpTypeBroadcastInDim, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.BroadcastInDim(v, toXLA(outputShape), broadcastAxes)
	}, x)
}

// Slice implements compute.StandardOps; nil strides are all 1.
func (f *Function) Slice(x compute.Value, starts, limits, strides []int) (compute.Value, error) {
	if strides == nil {
		strides = slices.Repeat([]int{1}, len(starts))
	}
	return f.unary(compute.OpTypeSlice, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Slice(v, starts, limits, strides)
	}, x)
}

// Reverse implements compute.StandardOps.
func (f *Function) Reverse(x compute.Value, axes ...int) (compute.Value, error) {
	return f.unary(compute.OpTypeReverse, func(v *stablehlo.Value) (*stablehlo.Value, error) {
		return stablehlo.Reverse(v, axes...)
	}, x)
}

// Concatenate implements compute.StandardOps.
func (f *Function) Concatenate(axis int, operands ...compute.Value) (compute.Value, error) {
	vs, err := f.operands(operands...)
	if err != nil {
		return nil, opError(compute.OpTypeConcatenate, err)
	}
	v, err := stablehlo.Concatenate(axis, vs...)
	return f.result(compute.OpTypeConcatenate, v, err)
}

// Iota implements compute.StandardOps.
func (f *Function) Iota(shape shapes.Shape, axis int) (compute.Value, error) {
	if err := f.checkOpen(); err != nil {
		return nil, err
	}
	v, err := f.fn.Iota(toXLA(shape), axis)
	return f.result(compute.OpTypeIota, v, err)
}

// DynamicSlice implements compute.StandardOps.
func (f *Function) DynamicSlice(x compute.Value, startIndices []compute.Value, sliceDims []int) (compute.Value, error) {
	vs, err := f.operands(append([]compute.Value{x}, startIndices...)...)
	if err != nil {
		return nil, opError(compute.OpTypeDynamicSlice, err)
	}
	v, err := stablehlo.DynamicSlice(vs[0], vs[1:], sliceDims)
	return f.result(compute.OpTypeDynamicSlice, v, err)
}

// DynamicUpdateSlice implements compute.StandardOps.
func (f *Function) DynamicUpdateSlice(x, update compute.Value, startIndices []compute.Value) (compute.Value, error) {
	vs, err := f.operands(append([]compute.Value{x, update}, startIndices...)...)
	if err != nil {
		return nil, opError(compute.OpTypeDynamicUpdateSlice, err)
	}
	v, err := stablehlo.DynamicUpdateSlice(vs[0], vs[1], vs[2:])
	return f.result(compute.OpTypeDynamicUpdateSlice, v, err)
}

// Pad implements compute.StandardOps.
func (f *Function) Pad(x, fill compute.Value, axesConfig ...compute.PadAxis) (compute.Value, error) {
	vs, err := f.operands(x, fill)
	if err != nil {
		return nil, opError(compute.OpTypePad, err)
	}
	rank := vs[0].Shape().Rank()
	lo, hi, interior := make([]int, rank), make([]int, rank), make([]int, rank)
	for i, c := range axesConfig {
		lo[i], hi[i], interior[i] = c.Start, c.End, c.Interior
	}
	v, err := stablehlo.Pad(vs[0], vs[1], lo, hi, interior)
	return f.result(compute.OpTypePad, v, err)
}

// OptimizationBarrier implements compute.StandardOps.
func (f *Function) OptimizationBarrier(operands ...compute.Value) ([]compute.Value, error) {
	vs, err := f.operands(operands...)
	if err != nil {
		return nil, opError(compute.OpTypeOptimizationBarrier, err)
	}
	outs, err := stablehlo.OptimizationBarrier(vs...)
	if err != nil {
		return nil, opError(compute.OpTypeOptimizationBarrier, err)
	}
	return f.wrapAll(outs), nil
}

// RNGBitGenerator implements compute.StandardOps with the Philox algorithm, whose state
// is GoMLX's [3]uint64 (compute.RNGStateShape). Its bits differ from the Go backend's.
func (f *Function) RNGBitGenerator(state compute.Value, shape shapes.Shape) (newState, values compute.Value, err error) {
	vs, err := f.operands(state)
	if err != nil {
		return nil, nil, opError(compute.OpTypeRNGBitGenerator, err)
	}
	s, v, err := stablehlo.RNGBitGenerator(vs[0], toXLA(shape), types.RNGPhilox)
	if err != nil {
		return nil, nil, opError(compute.OpTypeRNGBitGenerator, err)
	}
	return f.wrap(s), f.wrap(v), nil
}
