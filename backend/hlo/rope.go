//go:build cgo && !noxla

package hlo

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// rotatedQueries returns, with option triton=rope, the operands and shape of our
// attention kernel a that rotates the queries itself when query, the attention's q
// [B, Heads, T, D] (BHSD), is model's rotated queries (see rotatedQuery): the rows the
// queries were sliced from (queryRows) and cos and sin reshaped to [B, T, D/2]. XLA
// then drops the rotation of the queries and their slice, one kernel a layer; the keys'
// rotation stays where the cache's placement computes it. One-token windows take it
// (the AR step gained on the H200; longer windows, whose programs rotate 64 query rows
// before their first keys, did not), and longer windows only where the kernel places
// their keys too (window set: placedWindow), which needs the rows.
func (f *Function) rotatedQueries(query compute.Value, a triton.Attention, window bool) ([]*stablehlo.Value, triton.Attention, bool) {
	q, ok := query.(*value)
	if !f.builder.backend.tritonRope || !ok || (a.T != 1 && !window) {
		return nil, a, false
	}
	x, cos, sin, ok := rotatedQuery(q)
	if !ok {
		return nil, a, false
	}
	rows, rotaryFloat32 := queryRows(x)
	a.RotaryRow = rows.shape.Size() / (a.B * a.T)
	a.RotaryFloat32 = rotaryFloat32
	if triton.CheckAttention(a) != nil {
		return nil, a, false
	}
	vs, err := f.operands(rows, cos, sin)
	if err != nil {
		return nil, a, false
	}
	for i, s := range []shapes.Shape{shapes.Make(rows.shape.DType, a.B, a.T, a.RotaryRow),
		shapes.Make(dtypes.Float32, a.B, a.T, a.D/2), shapes.Make(dtypes.Float32, a.B, a.T, a.D/2)} {
		if vs[i], err = stablehlo.Reshape(vs[i], toXLA(s)); err != nil {
			return nil, a, false
		}
	}
	return vs, a, true
}

// queryRows follows x [b, t, n, d], the rows of heads rotatedQuery found, back to rows
// that hold them without a slice, so that the kernel reads them where they are: model's
// Reshape(SliceAxis(qkv, -1, 0:n·d)) of its fused product's rows qkv [b, t, R], and
// behind qkv's rounding to bfloat16 the float32 product (isFloat32 true), which the
// kernel rounds as it loads. It returns x itself where it was made otherwise.
func queryRows(x *value) (rows *value, isFloat32 bool) {
	slice := x
	if opOf(slice) == compute.OpTypeReshape {
		slice = slice.origin.args[0]
	}
	if opOf(slice) != compute.OpTypeSlice || slice.origin.starts == nil {
		return x, false
	}
	qkv := slice.origin.args[0]
	dims := qkv.shape.Dimensions
	if len(dims) != 3 || dims[0] != x.shape.Dimensions[0] || dims[1] != x.shape.Dimensions[1] ||
		!slices.Equal(slice.origin.starts, []int{0, 0, 0}) ||
		!slices.Equal(slice.origin.limits, []int{dims[0], dims[1], x.shape.Dimensions[2] * x.shape.Dimensions[3]}) {
		return x, false
	}
	if opOf(qkv) == compute.OpTypeConvertDType && qkv.origin.args[0].shape.DType == dtypes.Float32 {
		return qkv.origin.args[0], true
	}
	return qkv, false
}

// rotatedQuery recognises model's rotated queries (model/attention.go) in an
// attention's query operand q [B, Heads, T, D]: TransposeAllAxes(SliceAxis(qk, 2, 0:Heads),
// 0, 2, 1, 3), where qk [B, T, n, D] = rotary.apply(x) =
// ConvertDType(Concatenate(x₁·cos − x₂·sin, x₂·cos + x₁·sin), bfloat16), x₁ and x₂ the
// halves of ConvertDType(x, float32), x bfloat16 and cos, sin float32 [B, T, 1, D/2]
// (broadcast over the heads). It returns x, and cos and sin before any reshape or
// broadcast, each of B·T·D/2 values in (position, column) order.
func rotatedQuery(q *value) (x, cos, sin *value, ok bool) {
	if opOf(q) != compute.OpTypeTranspose || !slices.Equal(q.origin.axes, []int{0, 2, 1, 3}) {
		return nil, nil, nil, false
	}
	heads := q.origin.args[0]
	if opOf(heads) != compute.OpTypeSlice || heads.origin.starts == nil ||
		slices.ContainsFunc(heads.origin.starts, func(s int) bool { return s != 0 }) {
		return nil, nil, nil, false
	}
	qk := heads.origin.args[0]
	dims := qk.shape.Dimensions
	if len(dims) != 4 || !slices.Equal(heads.origin.limits, heads.shape.Dimensions) ||
		opOf(qk) != compute.OpTypeConvertDType || qk.shape.DType != dtypes.BFloat16 {
		return nil, nil, nil, false
	}
	b, t, n, d := dims[0], dims[1], dims[2], dims[3]
	half := d / 2
	out := qk.origin.args[0]
	if opOf(out) != compute.OpTypeConcatenate || out.shape.DType != dtypes.Float32 ||
		!slices.Equal(out.origin.axes, []int{3}) || len(out.origin.args) != 2 || d%2 != 0 {
		return nil, nil, nil, false
	}
	first, second := out.origin.args[0], out.origin.args[1]
	if opOf(first) != compute.OpTypeSub || opOf(second) != compute.OpTypeAdd {
		return nil, nil, nil, false
	}
	x1cos, x2sin, x2cos, x1sin := first.origin.args[0], first.origin.args[1], second.origin.args[0], second.origin.args[1]
	for _, p := range []*value{x1cos, x2sin, x2cos, x1sin} {
		if opOf(p) != compute.OpTypeMul {
			return nil, nil, nil, false
		}
	}
	x1, x2 := x1cos.origin.args[0], x2sin.origin.args[0]
	if x2cos.origin.args[0] != x2 || x1sin.origin.args[0] != x1 {
		return nil, nil, nil, false
	}
	cos, sin = perPosition(x1cos.origin.args[1], b, t, half), perPosition(x2sin.origin.args[1], b, t, half)
	if cos == nil || sin == nil || perPosition(x2cos.origin.args[1], b, t, half) != cos ||
		perPosition(x1sin.origin.args[1], b, t, half) != sin {
		return nil, nil, nil, false
	}
	if opOf(x1) != compute.OpTypeSlice || opOf(x2) != compute.OpTypeSlice {
		return nil, nil, nil, false
	}
	lower, upper := x1.origin, x2.origin
	if lower.args[0] != upper.args[0] || !slices.Equal(lower.starts, []int{0, 0, 0, 0}) ||
		!slices.Equal(lower.limits, []int{b, t, n, half}) || !slices.Equal(upper.starts, []int{0, 0, 0, half}) ||
		!slices.Equal(upper.limits, dims) {
		return nil, nil, nil, false
	}
	widened := lower.args[0]
	if opOf(widened) != compute.OpTypeConvertDType || widened.shape.DType != dtypes.Float32 {
		return nil, nil, nil, false
	}
	x = widened.origin.args[0]
	if x.shape.DType != dtypes.BFloat16 || !slices.Equal(x.shape.Dimensions, dims) {
		return nil, nil, nil, false
	}
	return x, cos, sin, true
}

// perPosition follows a rotation factor, a float32 operand of x's halves [b, t, n, half],
// back to the value of b·t·half entries it was made from: through the broadcast over the
// heads (from [b, t, 1, half]) and reshapes, which keep the order of the entries. It
// returns nil where the factor is something else.
func perPosition(v *value, b, t, half int) *value {
	if v.shape.DType != dtypes.Float32 {
		return nil
	}
	if opOf(v) == compute.OpTypeBroadcastInDim {
		src := v.origin.args[0]
		if !slices.Equal(v.origin.axes, []int{0, 1, 2, 3}) || !slices.Equal(src.shape.Dimensions, []int{b, t, 1, half}) {
			return nil
		}
		v = src
	}
	for opOf(v) == compute.OpTypeReshape {
		v = v.origin.args[0]
	}
	if v.shape.Size() != b*t*half {
		return nil
	}
	return v
}
