//go:build cgo && !noxla

package hlo

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// rotatedQueries returns, with tritonRope, the operands and shape of our
// attention kernel a that rotates the queries itself where query, the attention's q
// [B, Heads, T, D] (BHSD), is a kernels.WindowQKV's: the rows the queries come from
// (queryRows) and cos and sin reshaped to [B, T, D/2]. XLA then drops the rotation of
// the queries and their slice, one kernel a layer; the keys' rotation stays where the
// cache's placement computes it. One-token windows take it (the AR step gained on the
// H200; longer windows, whose programs rotate 64 query rows before their first keys,
// did not), and longer windows only where the kernel places their keys too (window
// set: placedWindow), which needs the rows.
func (f *Function) rotatedQueries(query compute.Value, a triton.Attention, window bool) ([]*stablehlo.Value, triton.Attention, bool) {
	q, ok := query.(*value)
	if !f.builder.backend.tritonRope || !ok || (a.T != 1 && !window) {
		return nil, a, false
	}
	m := originOf(q).qkv
	if m == nil || m.rows.shape.DType != dtypes.BFloat16 {
		return nil, a, false
	}
	rows, rotaryFloat32 := queryRows(m.rows)
	a.RotaryRow = rows.shape.Size() / (a.B * a.T)
	a.RotaryFloat32 = rotaryFloat32
	if triton.CheckAttention(a) != nil {
		return nil, a, false
	}
	vs, err := f.operands(rows, m.cos, m.sin)
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

// queryRows is the rows the kernel reads for a kernels.WindowQKV's bfloat16 rows: the
// float32 values they round where XLA rounds them (isFloat32 true; the kernel rounds
// them as it loads them), so that the rounding is left unused, else the rows.
func queryRows(rows *value) (_ *value, isFloat32 bool) {
	if src := originOf(rows).converted; src != nil && src.shape.DType == dtypes.Float32 {
		return src, true
	}
	return rows, false
}
