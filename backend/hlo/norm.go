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

// normedRows returns, with tritonNorm, a kernels.NormedDense of several rows
// as our norm kernel (triton.Kernels.RowNorm) and the dense product of its output,
// scaled by each row's 1/rms, where our kernels take it (normedDense.takenByKernels).
// Where X is a kernels.ResidualAdd that XLA would add, the kernel takes its addends
// and computes X too, and X's value becomes the kernel's sum from then on, so that
// XLA's add is left unused. So is a kernels.FP8Dense of several rows whose input is a
// kernels.NormalisedRow (normalisedInput): the kernel then returns the normalised row,
// which our GEMV multiplies by the bytes where fp8Tile has a tile, scaled by the
// layer's scale. The norm's own operations and the product it replaces are left for
// XLA to remove. ok is false, with nothing added, where the kernel does not take it.
func (f *Function) normedRows(r any) (v compute.Value, ok bool, err error) {
	if !f.builder.backend.tritonNorm {
		return nil, false, nil
	}
	var product, x, g, scale *value
	var norm triton.Norm
	switch r := r.(type) {
	case *normedDense:
		if !r.takenByKernels() {
			return nil, false, nil
		}
		product, x, g, norm = r.product, r.x, r.gain, r.norm
	case *fp8Dense:
		row := normalisedInput(r.product)
		if w := originOf(r.product).w; w == nil || e4m3Bytes(w) == nil || row == nil {
			return nil, false, nil
		}
		product, x, g, scale, norm = r.product, row.x, row.gain, r.scale, row.norm
	default:
		return nil, false, nil
	}
	k := x.shape.Dimensions[x.shape.Rank()-1]
	rows := triton.RowNorm{M: x.shape.Size() / k, K: k, Norm: norm}
	if rows.M < 2 || triton.CheckRowNorm(rows) != nil {
		return nil, false, nil
	}
	addends := []*value{x}
	if sum := originOf(x).addends; sum != nil && x.fn == f {
		addends, rows.Sum = sum, true
	}
	out, err := f.normedRowsProduct(product, x, g, scale, addends, rows)
	return out, true, err
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
