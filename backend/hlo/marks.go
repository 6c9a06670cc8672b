//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
	"github.com/blockdiff/blockdiff/internal/kernels"
)

// This file is the backend's side of package internal/kernels' contract: it receives
// the operations the model names (MarkKernel), checks them, and keeps them where the
// kernels that take them over read them (fold.go, fp8.go, norm.go, rope.go, place.go).

var _ kernels.Backend = (*Backend)(nil)

// MarkKernel implements [kernels.Backend]: it checks op's values against the contract
// and keeps op, for the operation that completes it (Mul or Add) or the operations that
// read its values. Without our kernels it keeps nothing.
func (b *Backend) MarkKernel(op kernels.Op) error {
	if !b.recordsOrigins() {
		return nil
	}
	cvs, err := kernels.Values(op)
	if err != nil {
		return err
	}
	vs := make([]*value, len(cvs))
	var bld *Builder
	for i, cv := range cvs {
		if cv == nil {
			continue
		}
		v, ok := cv.(*value)
		if !ok || v == nil {
			return fmt.Errorf("hlo: value #%d is a %T, not a value of this backend", i, cv)
		}
		if bld == nil {
			bld = v.fn.builder
		}
		if v.fn.builder != bld || bld.backend != b {
			return errors.New("hlo: its values belong to different programs")
		}
		vs[i] = v
	}
	if bld == nil {
		return errors.New("hlo: it has no values")
	}
	return bld.mark(op, vs)
}

// request is an operation named by the model that a Mul or an Add of a and b completes:
// a *normedDense, *fp8Dense or *residualAdd.
type request struct {
	name string // the operation's, kernels.Op.Name
	op   compute.OpType
	a, b *value
	mark any
}

// normedDense is a kernels.NormedDense: a Mul of product and factor.
type normedDense struct {
	x, gain, product, factor *value
	norm                     triton.Norm
	scale                    float64
}

// fp8Dense is a kernels.FP8Dense: a Mul of product and factor, scale broadcast.
type fp8Dense struct{ product, scale, factor *value }

// residualAdd is a kernels.ResidualAdd: an Add of residual and product.
type residualAdd struct{ residual, product *value }

// normalisedRow is a kernels.NormalisedRow: the row of x's norm of weight gain.
type normalisedRow struct {
	x, gain *value
	norm    triton.Norm
}

// windowQKV is a kernels.WindowQKV, kept on its query.
type windowQKV struct{ rows, keys, values, cos, sin *value }

// mark checks op, of values vs (in kernels.Values' order), and keeps it.
func (bld *Builder) mark(op kernels.Op, vs []*value) error {
	if err := checkMark(op, vs); err != nil {
		return fmt.Errorf("hlo: %w", err)
	}
	switch o := op.(type) {
	case kernels.NormedDense:
		x, product, factor := vs[0], vs[2], vs[3]
		bld.pending = append(bld.pending, request{name: op.Name(), op: compute.OpTypeMul, a: product, b: factor,
			mark: &normedDense{x: x, gain: vs[1], product: product, factor: factor, norm: normOf(x, o.Eps), scale: o.Scale}})
	case kernels.FP8Dense:
		product, factor := vs[0], vs[2]
		bld.pending = append(bld.pending, request{name: op.Name(), op: compute.OpTypeMul, a: product, b: factor,
			mark: &fp8Dense{product: product, scale: vs[1], factor: factor}})
	case kernels.ResidualAdd:
		residual, product := vs[0], vs[1]
		bld.pending = append(bld.pending, request{name: op.Name(), op: compute.OpTypeAdd, a: residual, b: product,
			mark: &residualAdd{residual: residual, product: product}})
	case kernels.NormalisedRow:
		vs[0].known().row = &normalisedRow{x: vs[1], gain: vs[2], norm: normOf(vs[1], o.Eps)}
	case kernels.E4M3Decoded:
		vs[0].known().e4m3 = vs[1]
	case kernels.SwiGLU:
		vs[0].known().swiGLU = vs[1]
	case kernels.WindowQKV:
		vs[1].known().qkv = &windowQKV{rows: vs[0], keys: vs[2], values: vs[3], cos: vs[4], sin: vs[5]}
	case kernels.TokenInCache:
		bld.place(&placement{placed: vs[0], cache: vs[1], x: vs[2], start: vs[3], n: vs[4]})
	case kernels.WindowInCache:
		bld.place(&placement{placed: vs[0], cache: vs[1], x: vs[2], start: vs[3], window: true})
	}
	return nil
}

// checkMark checks the values vs of op against the shapes the contract gives them.
func checkMark(op kernels.Op, vs []*value) error {
	for i, v := range vs {
		if v == nil && !(i == 4 && op.Name() == "TokenInCache") {
			return fmt.Errorf("%s: value #%d is missing", op.Name(), i)
		}
	}
	f32 := func(vs ...*value) bool {
		for _, v := range vs {
			if v.shape.DType != dtypes.Float32 {
				return false
			}
		}
		return true
	}
	switch op.(type) {
	case kernels.NormedDense:
		x, gain, product, factor := vs[0], vs[1], vs[2], vs[3]
		if err := checkRows(x, gain); err != nil {
			return err
		}
		if err := checkLeading(x, product, factor); err != nil || !f32(product, factor) || factor.shape.Dimensions[factor.shape.Rank()-1] != 1 {
			return fmt.Errorf("NormedDense: X %s, product %s and factor %s must be float32 [..., K], [..., N] and [..., 1]",
				x.shape, product.shape, factor.shape)
		}
	case kernels.FP8Dense:
		product, scale, factor := vs[0], vs[1], vs[2]
		if !f32(product, scale, factor) || product.shape.Rank() == 0 ||
			(scale.shape.Rank() != 0 && !slices.Equal(scale.shape.Dimensions, product.shape.Dimensions[product.shape.Rank()-1:])) ||
			(factor.shape.Rank() != 0 && !factor.shape.Equal(product.shape)) {
			return fmt.Errorf("FP8Dense: product %s, scale %s and factor %s must be float32 [..., N], [N] or a scalar, "+
				"and [..., N] or a scalar", product.shape, scale.shape, factor.shape)
		}
	case kernels.ResidualAdd:
		residual, product := vs[0], vs[1]
		if !f32(residual) || !residual.shape.Equal(product.shape) {
			return fmt.Errorf("ResidualAdd: residual %s and product %s must be float32 of one shape", residual.shape, product.shape)
		}
	case kernels.NormalisedRow:
		row, x, gain := vs[0], vs[1], vs[2]
		if err := checkRows(x, gain); err != nil {
			return err
		}
		if !slices.Equal(row.shape.Dimensions, x.shape.Dimensions) {
			return fmt.Errorf("NormalisedRow: row %s must have X's dimensions %v", row.shape, x.shape.Dimensions)
		}
	case kernels.E4M3Decoded:
		values, bytes := vs[0], vs[1]
		if bytes.shape.DType != dtypes.Uint8 || !values.shape.DType.IsFloat() || !slices.Equal(values.shape.Dimensions, bytes.shape.Dimensions) {
			return fmt.Errorf("E4M3Decoded: values %s must be floats of the shape of bytes %s, uint8", values.shape, bytes.shape)
		}
	case kernels.SwiGLU:
		h, gu := vs[0], vs[1]
		if err := checkLeading(h, gu); err != nil || 2*h.shape.Dimensions[h.shape.Rank()-1] != gu.shape.Dimensions[gu.shape.Rank()-1] {
			return fmt.Errorf("SwiGLU: value %s must be [..., F] and gate/up %s [..., 2·F]", h.shape, gu.shape)
		}
	case kernels.WindowQKV:
		return checkWindowQKV(vs[0], vs[1], vs[2], vs[3], vs[4], vs[5])
	case kernels.TokenInCache:
		return checkPlacement(vs[0], vs[1], vs[2], vs[3], vs[4], false)
	case kernels.WindowInCache:
		return checkPlacement(vs[0], vs[1], vs[2], vs[3], nil, true)
	default:
		return fmt.Errorf("%s is not an operation this backend knows", op.Name())
	}
	return nil
}

// normOf is the norm our kernels compute for an RMSNorm of x's rows and epsilon eps,
// with the constants model's decomposition multiplies by and adds in float32.
func normOf(x *value, eps float64) triton.Norm {
	k := x.shape.Dimensions[x.shape.Rank()-1]
	return triton.Norm{InvK: float32(1 / float64(k)), Eps: float32(eps)}
}

// checkRows checks that x is float32 rows [..., K] and gain a norm weight [K].
func checkRows(x, gain *value) error {
	if x.shape.DType != dtypes.Float32 || x.shape.Rank() == 0 ||
		!slices.Equal(gain.shape.Dimensions, x.shape.Dimensions[x.shape.Rank()-1:]) {
		return fmt.Errorf("X %s and Gain %s must be float32 [..., K] and [K]", x.shape, gain.shape)
	}
	return nil
}

// checkLeading checks that vs have one rank, at least 1, and the same dimensions but
// for their last.
func checkLeading(vs ...*value) error {
	rank := vs[0].shape.Rank()
	for _, v := range vs {
		if v.shape.Rank() != rank || rank == 0 ||
			!slices.Equal(v.shape.Dimensions[:rank-1], vs[0].shape.Dimensions[:rank-1]) {
			return fmt.Errorf("%s and %s must be [..., n] of the same leading dimensions", vs[0].shape, v.shape)
		}
	}
	return nil
}

// checkWindowQKV checks the shapes of a kernels.WindowQKV.
func checkWindowQKV(rows, q, keys, values, cos, sin *value) error {
	if q.shape.Rank() != 4 || keys.shape.Rank() != 4 {
		return fmt.Errorf("WindowQKV: query %s and keys %s must be [b, heads, w, d] and [b, w, kvHeads, d]", q.shape, keys.shape)
	}
	b, heads, w, d := q.shape.Dimensions[0], q.shape.Dimensions[1], q.shape.Dimensions[2], q.shape.Dimensions[3]
	kvHeads := keys.shape.Dimensions[2]
	half := shapes.Make(dtypes.Float32, b, w, d/2)
	if !slices.Equal(keys.shape.Dimensions, []int{b, w, kvHeads, d}) || !values.shape.Equal(keys.shape) ||
		!slices.Equal(rows.shape.Dimensions, []int{b, w, (heads + 2*kvHeads) * d}) || !cos.shape.Equal(half) || !sin.shape.Equal(half) {
		return fmt.Errorf("WindowQKV: rows %s, query %s, keys %s, values %s, cos %s and sin %s do not fit "+
			"[b, w, (heads+2·kvHeads)·d], [b, heads, w, d], [b, w, kvHeads, d] twice and float32 [b, w, d/2] twice",
			rows.shape, q.shape, keys.shape, values.shape, cos.shape, sin.shape)
	}
	return nil
}

// checkPlacement checks the shapes of a kernels.TokenInCache (written may be nil) or,
// window set, a kernels.WindowInCache (at batch 1).
func checkPlacement(placed, cache, x, start, written *value, window bool) error {
	name, want := "TokenInCache", "cache [b, kvHeads, s, d], token [b, 1, kvHeads, d], start and written int32 [b]"
	if window {
		name, want = "WindowInCache", "cache [1, kvHeads, s, d], window [1, w, kvHeads, d], start int32 [1]"
	}
	c := cache.shape.Dimensions
	ok := cache.shape.Rank() == 4 && placed.shape.Equal(cache.shape) && x.shape.Rank() == 4 && x.shape.DType == cache.shape.DType &&
		start.shape.Equal(shapes.Make(dtypes.Int32, c[0])) && (written == nil || written.shape.Equal(start.shape))
	if ok {
		xd := x.shape.Dimensions
		ok = xd[0] == c[0] && xd[2] == c[1] && xd[3] == c[3] && (window && c[0] == 1 || !window && xd[1] == 1)
	}
	if !ok {
		got := fmt.Sprintf("cache %s, %s, start %s", cache.shape, x.shape, start.shape)
		if written != nil {
			got += ", written " + written.shape.String()
		}
		return fmt.Errorf("%s: %s do not fit %s", name, got, want)
	}
	return nil
}

// completes returns the request that op of lhs and rhs (either way round) completes,
// which is then no longer pending, or nil.
func (bld *Builder) completes(op compute.OpType, lhs, rhs compute.Value) any {
	l, ok1 := lhs.(*value)
	r, ok2 := rhs.(*value)
	if !ok1 || !ok2 {
		return nil
	}
	for i, q := range bld.pending {
		if q.op == op && (q.a == l && q.b == r || q.a == r && q.b == l) {
			bld.pending = slices.Delete(bld.pending, i, i+1)
			return q.mark
		}
	}
	return nil
}

// checkCompleted fails where an operation named by the model was never completed: the
// model's graph does not build the Mul or Add that the contract says it does.
func (bld *Builder) checkCompleted() error {
	if len(bld.pending) == 0 {
		return nil
	}
	var names []string
	for _, q := range bld.pending {
		names = append(names, fmt.Sprintf("%s, by %s of %s and %s", q.name, q.op, q.a.shape, q.b.shape))
	}
	return fmt.Errorf("hlo: operations named by the model (package internal/kernels) but never completed: %s",
		strings.Join(names, "; "))
}
