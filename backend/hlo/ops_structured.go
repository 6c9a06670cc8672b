//go:build cgo && !noxla

package hlo

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types"
	xshapes "github.com/gomlx/go-xla/types/shapes"
)

// This file holds the operations that take a computation (reductions, scatters,
// ArgMinMax, CumSum), the dot product and gather.

// combineFunc combines two values element-wise.
type combineFunc func(lhs, rhs *stablehlo.Value) (*stablehlo.Value, error)

// combiner returns a closure of f that combines two scalars of dtype.
func (f *Function) combiner(dtype dtypes.DType, combine combineFunc) (*stablehlo.Function, error) {
	c := f.fn.Closure()
	scalar := xshapes.Make(dtype)
	lhs, err := c.Input(scalar)
	if err != nil {
		return nil, err
	}
	rhs, err := c.Input(scalar)
	if err != nil {
		return nil, err
	}
	out, err := combine(lhs, rhs)
	if err != nil {
		return nil, err
	}
	return c, c.Return(out)
}

// reduction is how a reduction combines values and the identity it starts from.
type reduction struct {
	combine  combineFunc
	identity func(dtypes.DType) any
}

// allOnes is the identity of a bitwise AND.
func allOnes(dtype dtypes.DType) any {
	if dtype.IsUnsigned() {
		return dtype.HighestValue()
	}
	return toDType(dtype, -1)
}

// toDType converts x to a scalar of dtype's Go type, for integers and floats.
func toDType(dtype dtypes.DType, x int) any {
	switch dtype {
	case dtypes.Int8:
		return int8(x)
	case dtypes.Int16:
		return int16(x)
	case dtypes.Int32:
		return int32(x)
	case dtypes.Int64:
		return int64(x)
	case dtypes.Uint8:
		return uint8(x)
	case dtypes.Uint16:
		return uint16(x)
	case dtypes.Uint32:
		return uint32(x)
	case dtypes.Uint64:
		return uint64(x)
	}
	return nil
}

var reductions = map[compute.OpType]reduction{
	compute.OpTypeReduceSum:        {stablehlo.Add, func(dtypes.DType) any { return 0.0 }},
	compute.OpTypeReduceProduct:    {stablehlo.Multiply, func(dtypes.DType) any { return 1.0 }},
	compute.OpTypeReduceMax:        {stablehlo.Maximum, dtypes.DType.LowestValue},
	compute.OpTypeReduceMin:        {stablehlo.Minimum, dtypes.DType.HighestValue},
	compute.OpTypeReduceLogicalOr:  {stablehlo.Or, func(dtypes.DType) any { return false }},
	compute.OpTypeReduceLogicalAnd: {stablehlo.And, func(dtypes.DType) any { return true }},
	compute.OpTypeReduceLogicalXor: {stablehlo.Xor, func(dtypes.DType) any { return false }},
	compute.OpTypeReduceBitwiseOr:  {stablehlo.Or, func(dtypes.DType) any { return 0.0 }},
	compute.OpTypeReduceBitwiseXor: {stablehlo.Xor, func(dtypes.DType) any { return 0.0 }},
	compute.OpTypeReduceBitwiseAnd: {stablehlo.And, allOnes},
}

// constantOf adds the scalar c of dtype: a float64 is converted (0 and 1 of any
// dtype), other values must already be of dtype's Go type.
func (f *Function) constantOf(dtype dtypes.DType, c any) (*stablehlo.Value, error) {
	if x, ok := c.(float64); ok {
		return f.scalar(dtype, x)
	}
	if dtypes.FromAny(c) != dtype {
		return nil, fmt.Errorf("no identity of %s", dtype)
	}
	return f.fn.ConstantFromScalar(c)
}

// reduce reduces x over axes (all axes if none).
func (f *Function) reduce(op compute.OpType, x compute.Value, axes []int) (compute.Value, error) {
	r := reductions[op]
	vs, err := f.operands(x)
	if err != nil {
		return nil, opError(op, err)
	}
	dtype := vs[0].Shape().DType
	if len(axes) == 0 {
		axes = make([]int, vs[0].Shape().Rank())
		for i := range axes {
			axes[i] = i
		}
	}
	init, err := f.constantOf(dtype, r.identity(dtype))
	if err != nil {
		return nil, opError(op, err)
	}
	c, err := f.combiner(dtype, r.combine)
	if err != nil {
		return nil, opError(op, err)
	}
	v, err := stablehlo.Reduce(vs[0], init, c, axes...)
	return f.result(op, v, err)
}

// ReduceSum implements compute.StandardOps.
func (f *Function) ReduceSum(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceSum, x, axes)
}

// ReduceProduct implements compute.StandardOps.
func (f *Function) ReduceProduct(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceProduct, x, axes)
}

// ReduceMax implements compute.StandardOps.
func (f *Function) ReduceMax(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceMax, x, axes)
}

// ReduceMin implements compute.StandardOps.
func (f *Function) ReduceMin(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceMin, x, axes)
}

// ReduceLogicalOr implements compute.StandardOps.
func (f *Function) ReduceLogicalOr(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceLogicalOr, x, axes)
}

// ReduceLogicalAnd implements compute.StandardOps.
func (f *Function) ReduceLogicalAnd(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceLogicalAnd, x, axes)
}

// ReduceLogicalXor implements compute.StandardOps.
func (f *Function) ReduceLogicalXor(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceLogicalXor, x, axes)
}

// ReduceBitwiseOr implements compute.StandardOps.
func (f *Function) ReduceBitwiseOr(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceBitwiseOr, x, axes)
}

// ReduceBitwiseXor implements compute.StandardOps.
func (f *Function) ReduceBitwiseXor(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceBitwiseXor, x, axes)
}

// ReduceBitwiseAnd implements compute.StandardOps.
func (f *Function) ReduceBitwiseAnd(x compute.Value, axes ...int) (compute.Value, error) {
	return f.reduce(compute.OpTypeReduceBitwiseAnd, x, axes)
}

// ArgMinMax implements compute.StandardOps as one reduction of (value, index) pairs:
// NaN wins (as in JAX and PyTorch), then the smaller (isMin) or larger value, then the
// lower index.
func (f *Function) ArgMinMax(x compute.Value, axis int, outputDType dtypes.DType, isMin bool) (compute.Value, error) {
	op := compute.OpTypeArgMinMax
	vs, err := f.operands(x)
	if err != nil {
		return nil, opError(op, err)
	}
	in := vs[0].Shape()
	indices, err := f.fn.Iota(xshapes.Make(outputDType, in.Dimensions...), axis)
	if err != nil {
		return nil, opError(op, err)
	}
	start := in.DType.LowestValue()
	if isMin {
		start = in.DType.HighestValue()
	}
	initValue, err := f.fn.ConstantFromScalar(start)
	if err != nil {
		return nil, opError(op, err)
	}
	initIndex, err := f.scalar(outputDType, 0)
	if err != nil {
		return nil, opError(op, err)
	}
	c, err := argMinMaxCombiner(f.fn.Closure(), in.DType, outputDType, isMin)
	if err != nil {
		return nil, opError(op, err)
	}
	outs, err := stablehlo.MultiReduce([]*stablehlo.Value{vs[0], indices}, []*stablehlo.Value{initValue, initIndex}, c, axis)
	if err != nil {
		return nil, opError(op, err)
	}
	return f.wrap(outs[1]), nil
}

// argMinMaxCombiner builds in c the reduction of ArgMinMax over (a, ai), (b, bi): a
// wins if it is NaN and b is not, or if neither is NaN and a is better, or on a tie
// (equal, or both NaN) if ai < bi.
func argMinMaxCombiner(c *stablehlo.Function, dtype, indexDType dtypes.DType, isMin bool) (*stablehlo.Function, error) {
	var a, ai, b, bi *stablehlo.Value
	for _, in := range []struct {
		v     **stablehlo.Value
		dtype dtypes.DType
	}{{&a, dtype}, {&ai, indexDType}, {&b, dtype}, {&bi, indexDType}} {
		var err error
		if *in.v, err = c.Input(xshapes.Make(in.dtype)); err != nil {
			return nil, err
		}
	}
	// Errors of the steps below are caught by the first one to fail; later ones are
	// skipped.
	var err error
	cmp := func(x, y *stablehlo.Value, dir types.ComparisonDirection) *stablehlo.Value {
		if err != nil {
			return nil
		}
		var v *stablehlo.Value
		v, err = stablehlo.Compare(x, y, dir, compareType(x.Shape().DType))
		return v
	}
	logical := func(combine combineFunc, x, y *stablehlo.Value) *stablehlo.Value {
		if err != nil {
			return nil
		}
		var v *stablehlo.Value
		v, err = combine(x, y)
		return v
	}
	dir := types.CompareGT
	if isMin {
		dir = types.CompareLT
	}
	better, equal := cmp(a, b, dir), cmp(a, b, types.CompareEQ)
	aWins := better
	if dtype.IsFloat() {
		aNaN, bNaN := cmp(a, a, types.CompareNE), cmp(b, b, types.CompareNE)
		var bNotNaN, aNotNaN *stablehlo.Value
		if err == nil {
			bNotNaN, err = stablehlo.Not(bNaN)
		}
		if err == nil {
			aNotNaN, err = stablehlo.Not(aNaN)
		}
		aWins = logical(stablehlo.Or, logical(stablehlo.And, aNaN, bNotNaN),
			logical(stablehlo.And, logical(stablehlo.And, aNotNaN, bNotNaN), better))
		equal = logical(stablehlo.Or, equal, logical(stablehlo.And, aNaN, bNaN))
	}
	aWins = logical(stablehlo.Or, aWins, logical(stablehlo.And, equal, cmp(ai, bi, types.CompareLT)))
	if err != nil {
		return nil, err
	}
	value, err := stablehlo.Select(aWins, a, b)
	if err != nil {
		return nil, err
	}
	index, err := stablehlo.Select(aWins, ai, bi)
	if err != nil {
		return nil, err
	}
	return c, c.Return(value, index)
}

// CumSum implements compute.StandardOps as one reduce_window (the lowering JAX uses on
// GPU, which XLA rewrites into a scan): a window the length n of the axis, padded by n
// on one side, gives n+1 partial sums, of which the inclusive and exclusive sums are
// the last or first n.
func (f *Function) CumSum(x compute.Value, axis int, options compute.CumSumOptions) (compute.Value, error) {
	op := compute.OpTypeCumSum
	vs, err := f.operands(x)
	if err != nil {
		return nil, opError(op, err)
	}
	shape := fromXLA(vs[0].Shape())
	if axis < 0 || axis >= shape.Rank() {
		return nil, opError(op, fmt.Errorf("axis %d out of range for %s", axis, shape))
	}
	n, rank := shape.Dimensions[axis], shape.Rank()
	window, strides, dilations := make([]int, rank), make([]int, rank), make([]int, rank)
	paddings := make([][2]int, rank)
	for i := range rank {
		window[i], strides[i], dilations[i] = 1, 1, 1
	}
	window[axis] = n
	// Forward: sums[j] = x[0] + … + x[j-1]. Reverse: sums[j] = x[j] + … + x[n-1].
	paddings[axis] = [2]int{n, 0}
	if options.Reverse {
		paddings[axis] = [2]int{0, n}
	}
	zero, err := f.scalar(shape.DType, 0)
	if err != nil {
		return nil, opError(op, err)
	}
	c, err := f.combiner(shape.DType, stablehlo.Add)
	if err != nil {
		return nil, opError(op, err)
	}
	sums, err := stablehlo.ReduceWindow(vs[0], zero, c, window, strides, dilations, dilations, paddings)
	if err != nil {
		return nil, opError(op, err)
	}
	first := 1 // the inclusive forward sums, and the exclusive reverse ones, skip sums[0]
	if options.Exclusive != options.Reverse {
		first = 0
	}
	starts, limits := make([]int, rank), shape.Clone().Dimensions
	starts[axis], limits[axis] = first, first+n
	v, err := stablehlo.Slice(sums, starts, limits, strides)
	return f.result(op, v, err)
}

// DotGeneral implements compute.StandardOps. The accumulator dtype (else the output
// dtype) is StableHLO's preferred element type; an output dtype other than the
// accumulator's is a conversion after. With tritonGEMV, the dense bfloat16 products
// it names run our Triton GEMV instead (see tritonGEMV, in gemv.go), and so do those
// whose weight is FP8 bytes decoded by package quant's table, on the bytes (fp8.go).
func (f *Function) DotGeneral(lhs compute.Value, lhsContractingAxes, lhsBatchAxes []int,
	rhs compute.Value, rhsContractingAxes, rhsBatchAxes []int, config compute.DotGeneralConfig) (compute.Value, error) {
	op := compute.OpTypeDotGeneral
	vs, err := f.operands(lhs, rhs)
	if err != nil {
		return nil, opError(op, err)
	}
	v, ok, err := f.fp8Product(vs[0], lhs, lhsContractingAxes, lhsBatchAxes, rhs, rhsContractingAxes, rhsBatchAxes, config)
	var out compute.Value
	if ok {
		out, err = f.result(op, v, err)
	} else {
		out, err = f.dotGeneral(vs, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes, config)
	}
	if err == nil {
		f.denseProduct(out, lhs, rhs, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes, config)
	}
	return out, err
}

// fp8Product is our kernel for the product of lhs (x, its operand) by rhs where rhs is
// FP8 bytes that package quant's table decodes (e4m3Bytes), as tritonGEMV returns it:
// of lhs's bytes where package quant's W8A8 layer quantized it, else of x's values; ok
// is false for every other product.
func (f *Function) fp8Product(x *stablehlo.Value, lhs compute.Value, lhsContractingAxes, lhsBatchAxes []int,
	rhs compute.Value, rhsContractingAxes, rhsBatchAxes []int, config compute.DotGeneralConfig) (*stablehlo.Value, bool, error) {
	wBytes := e4m3Bytes(rhs)
	if wBytes == nil {
		return nil, false, nil
	}
	ws, err := f.operands(wBytes)
	if err != nil {
		return nil, true, err
	}
	w := ws[0]
	var xBytes *stablehlo.Value
	if bytes := e4m3Bytes(lhs); bytes != nil {
		b, err := f.operands(bytes)
		if err != nil {
			return nil, true, err
		}
		if v, ok, err := f.tritonGEMV(b[0], lhsContractingAxes, lhsBatchAxes, w, rhsContractingAxes, rhsBatchAxes, config); ok {
			return v, ok, err
		}
		xBytes = b[0]
	}
	return f.fp8BytesProduct(x, xBytes, lhsContractingAxes, lhsBatchAxes, w, rhsContractingAxes, rhsBatchAxes, config)
}

// fp8BytesProduct is, with tritonGEMV, the product of x by FP8 bytes w: our GEMV on
// the bytes where fp8Tile has a tile, else XLA's dot_general of the bytes converted as
// f8E4M3FN values (e4m3Values), so that XLA's GEMM reads the bytes rather than a decoded
// copy of the weight. Where a W8A8 layer quantized x (xBytes not nil), x's bytes are
// converted too, for XLA's FP8 × FP8 GEMM on the tensor cores under precision HIGHEST
// (sums within ~3e-4 of the exact product, far under x's own rounding to E4M3). ok is
// false without tritonGEMV (the plain backend keeps package quant's table).
func (f *Function) fp8BytesProduct(x, xBytes *stablehlo.Value, lhsContractingAxes, lhsBatchAxes []int,
	w *stablehlo.Value, rhsContractingAxes, rhsBatchAxes []int, config compute.DotGeneralConfig) (*stablehlo.Value, bool, error) {
	if f.builder.backend.tritonGEMV == gemvNone {
		return nil, false, nil
	}
	if v, ok, err := f.tritonGEMV(x, lhsContractingAxes, lhsBatchAxes, w, rhsContractingAxes, rhsBatchAxes, config); ok {
		return v, ok, err
	}
	wValues, err := f.e4m3Values(w, x.Shape().DType)
	if err != nil {
		return nil, true, err
	}
	lhs := x
	if xBytes != nil {
		if lhs, err = f.e4m3Values(xBytes, x.Shape().DType); err != nil {
			return nil, true, err
		}
	}
	v, err := f.xlaDot([]*stablehlo.Value{lhs, wValues}, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes, config, xBytes != nil)
	return v, true, err
}

// dotGeneral is DotGeneral of the operands vs: our Triton GEMV where tritonGEMV lowers
// it, else stablehlo.dot_general.
func (f *Function) dotGeneral(vs []*stablehlo.Value, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes []int,
	config compute.DotGeneralConfig) (compute.Value, error) {
	op := compute.OpTypeDotGeneral
	if v, ok, err := f.tritonGEMV(vs[0], lhsContractingAxes, lhsBatchAxes, vs[1], rhsContractingAxes, rhsBatchAxes, config); ok {
		return f.result(op, v, err)
	}
	v, err := f.xlaDot(vs, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes, config, false)
	return f.result(op, v, err)
}

// xlaDot is stablehlo.dot_general of the operands vs, its preferred element type the
// accumulator dtype (else the output dtype), converted to the output dtype after; of
// precision HIGHEST where highest is true, or for float32 under option notf32.
func (f *Function) xlaDot(vs []*stablehlo.Value, lhsContractingAxes, lhsBatchAxes, rhsContractingAxes, rhsBatchAxes []int,
	config compute.DotGeneralConfig, highest bool) (*stablehlo.Value, error) {
	preferred := vs[0].Shape().DType
	if config.AccumulatorDType != dtypes.InvalidDType {
		preferred = config.AccumulatorDType
	} else if config.OutputDType != dtypes.InvalidDType {
		preferred = config.OutputDType
	}
	dot := stablehlo.DotGeneral(vs[0], lhsContractingAxes, lhsBatchAxes, vs[1], rhsContractingAxes, rhsBatchAxes).
		OutputDType(preferred)
	if highest || f.builder.backend.noTF32 && vs[0].Shape().DType == dtypes.Float32 {
		dot = dot.Precision(types.DotGeneralPrecisionHighest, types.DotGeneralPrecisionHighest)
	}
	v, err := dot.Done()
	if err == nil && config.OutputDType != dtypes.InvalidDType && config.OutputDType != preferred {
		v, err = stablehlo.Convert(v, config.OutputDType)
	}
	return v, err
}

// Gather implements compute.StandardOps (no batching axes).
func (f *Function) Gather(operand, startIndices compute.Value, indexVectorAxis int,
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (compute.Value, error) {
	op := compute.OpTypeGather
	vs, err := f.operands(operand, startIndices)
	if err != nil {
		return nil, opError(op, err)
	}
	v, err := stablehlo.Gather(vs[0], vs[1], indexVectorAxis, offsetOutputAxes, collapsedSliceAxes, nil, nil,
		startIndexMap, sliceSizes, indicesAreSorted)
	return f.result(op, v, err)
}

// scatter scatters updates into operand at scatterIndices, combining with combine.
func (f *Function) scatter(op compute.OpType, combine combineFunc, operand, scatterIndices, updates compute.Value,
	indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int,
	indicesAreSorted, uniqueIndices bool) (compute.Value, error) {
	vs, err := f.operands(operand, scatterIndices, updates)
	if err != nil {
		return nil, opError(op, err)
	}
	c, err := f.combiner(vs[0].Shape().DType, combine)
	if err != nil {
		return nil, opError(op, err)
	}
	v, err := stablehlo.Scatter(vs[0], vs[1], vs[2], updateWindowAxes, insertedWindowAxes, nil, nil,
		scatterAxesToOperandAxes, indexVectorAxis, indicesAreSorted, uniqueIndices, c)
	return f.result(op, v, err)
}

// ScatterSum implements compute.StandardOps.
func (f *Function) ScatterSum(operand, scatterIndices, updates compute.Value, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (compute.Value, error) {
	return f.scatter(compute.OpTypeScatterSum, stablehlo.Add, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterMax implements compute.StandardOps.
func (f *Function) ScatterMax(operand, scatterIndices, updates compute.Value, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (compute.Value, error) {
	return f.scatter(compute.OpTypeScatterMax, stablehlo.Maximum, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterMin implements compute.StandardOps.
func (f *Function) ScatterMin(operand, scatterIndices, updates compute.Value, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (compute.Value, error) {
	return f.scatter(compute.OpTypeScatterMin, stablehlo.Minimum, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}
