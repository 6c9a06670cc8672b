//go:build cgo && !noxla

package hlo

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	xshapes "github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// normedRows returns, with option triton=norm, the product of lhs and rhs as our norm
// kernel (triton.Kernels.RowNorm) and the dense product of its output, when they are
// model's normed dense layer of several rows: a dense product (denseProduct) of
// normWeighted(x, g) times invRMS(x), either way round (normedLayerOf), as
// normedProduct recognises it for one row. Where x is the sum of two float32 addends
// of its shape (the residual add before the norm), the kernel takes them and computes
// x too, and x's value becomes the kernel's sum from then on, so that XLA's add is
// left unused. So is package quant's FP8 layer of several rows whose input is its
// normalised row (normalisedRowOf), its product of FP8 bytes times its scale
// (fp8ScaleOf): the kernel then returns the normalised row, which our GEMV multiplies
// by the bytes where fp8Tile has a tile. The norm's own operations and the product it
// replaces are left for XLA to remove. ok is false, with nothing added, for every
// other product.
func (f *Function) normedRows(lhs, rhs compute.Value) (v compute.Value, ok bool, err error) {
	l, ok1 := lhs.(*value)
	r, ok2 := rhs.(*value)
	if !f.builder.backend.tritonNorm || !ok1 || !ok2 {
		return nil, false, nil
	}
	for _, pair := range [][2]*value{{l, r}, {r, l}} {
		product := pair[0]
		if opOf(product) != compute.OpTypeDotGeneral || product.origin.w == nil {
			continue
		}
		x, g, norm, ok := normedLayerOf(product, pair[1])
		scale, fp8 := fp8ScaleOf(product, pair[1])
		if !ok && fp8 {
			x, g, norm, ok = normalisedRowOf(product.origin.x)
		}
		if !ok {
			continue
		}
		if !norm.Before {
			scale = nil
		}
		k := x.shape.Dimensions[x.shape.Rank()-1]
		rows := triton.RowNorm{M: x.shape.Size() / k, K: k, Norm: norm}
		if rows.M < 2 || triton.CheckRowNorm(rows) != nil {
			continue
		}
		addends := []*value{x}
		if a, b, ok := sumOf(x); ok && x.fn == f {
			addends, rows.Sum = []*value{a, b}, true
		}
		out, err := f.normedRowsProduct(product, x, g, scale, addends, rows)
		return out, true, err
	}
	return nil, false, nil
}

// sumOf returns the addends of x when x is the sum of two float32 values of its shape.
func sumOf(x *value) (a, b *value, ok bool) {
	if opOf(x) != compute.OpTypeAdd || x.shape.DType != dtypes.Float32 {
		return nil, nil, false
	}
	a, b = x.origin.args[0], x.origin.args[1]
	return a, b, a.shape.Equal(x.shape) && b.shape.Equal(x.shape)
}

// normedRowsProduct appends normedRows' kernel for rows of x (from its addends, one or
// two) and norm weight g, then product's dense product of the kernel's output scaled
// by each row's 1/rms, and returns that; with rows.Sum, x's value becomes the kernel's
// sum. With rows.Before (an FP8 layer's normalised input), the product is of FP8 bytes
// (e4m3Bytes of its weight, fp8BytesProduct), scaled by scale instead.
func (f *Function) normedRowsProduct(product, x, g, scale *value, addends []*value, rows triton.RowNorm) (compute.Value, error) {
	op := compute.OpTypeMul
	var args []compute.Value
	for _, a := range addends {
		args = append(args, a)
	}
	args = append(args, g, product.origin.w)
	if rows.Before {
		args = append(args, scale, e4m3Bytes(product.origin.w))
	}
	vs, err := f.operands(args...)
	if err != nil {
		return nil, opError(op, err)
	}
	n := len(addends)
	w := vs[n+1]
	flat := xshapes.Make(dtypes.Float32, rows.M, rows.K)
	for i := range addends {
		if vs[i], err = stablehlo.Reshape(vs[i], flat); err != nil {
			return nil, opError(op, err)
		}
	}
	var b *stablehlo.Value
	if rows.Sum {
		b = vs[1]
	}
	sum, xg, inv, err := f.builder.backend.kernels().RowNorm(vs[0], b, vs[n], rows)
	if err != nil {
		return nil, opError(op, err)
	}
	if rows.Sum {
		if x.v, err = stablehlo.Reshape(sum, toXLA(x.shape)); err != nil {
			return nil, opError(op, err)
		}
	}
	if xg, err = stablehlo.Reshape(xg, toXLA(product.origin.x.shape)); err != nil {
		return nil, opError(op, err)
	}
	contracting := []int{product.origin.x.shape.Rank() - 1}
	var y *stablehlo.Value
	if rows.Before {
		v, ok, err := f.fp8BytesProduct(xg, nil, contracting, nil, vs[n+3], []int{1}, nil, product.origin.config)
		if err != nil {
			return nil, opError(op, err)
		}
		if ok {
			y = v
		}
	}
	if y == nil {
		dense, err := f.dotGeneral([]*stablehlo.Value{xg, w}, contracting, nil, []int{1}, nil, product.origin.config)
		if err != nil {
			return nil, err
		}
		y = dense.(*value).v
	}
	// The factor: each row's 1/rms [..., 1], or an FP8 layer's scale [N] or scalar.
	dims := slices.Clone(product.shape.Dimensions)
	factor := inv
	if rows.Before {
		factor = vs[n+2]
		for i := range dims[:len(dims)-1] {
			dims[i] = 1
		}
		if scale.shape.Size() == 1 {
			dims[len(dims)-1] = 1
		}
	} else {
		dims[len(dims)-1] = 1
	}
	if factor, err = stablehlo.Reshape(factor, xshapes.Make(dtypes.Float32, dims...)); err == nil {
		factor, err = broadcastTo(factor, product.shape.Dimensions)
	}
	var scaled *stablehlo.Value
	if err == nil {
		scaled, err = stablehlo.Multiply(y, factor)
	}
	return f.result(op, scaled, err)
}
