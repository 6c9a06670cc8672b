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

// origin is what our kernels know of how a value was made: by the backend's own
// operations (a dense product's operands, a reshape's or a rounding's operand, a split
// GEMV's partial sums, the addends of a residual add or an FP8 layer's product and
// scale left to XLA), or by the operations the model named (package internal/kernels,
// marks.go). The backend keeps it only where it runs kernels that read it
// (recordsOrigins).
type origin struct {
	// x and w are a dense product's rows [..., K] and weight [N, K], config its
	// configuration (denseProduct).
	x, w   *value
	config compute.DotGeneralConfig
	// reshaped is a reshape's operand, converted a dtype conversion's.
	reshaped, converted *value
	// parts is, for a layer's output that a split kernel computed (residualProduct),
	// its partial sums [splits, n], whose rows summed in order are the value: the
	// kernels that read the output read them instead (partsOf).
	parts *value
	// addends are a kernels.ResidualAdd's operands where XLA adds them (norm.go's
	// kernel may add them itself); fp8 a kernels.FP8Dense's where XLA multiplies them.
	addends []*value
	fp8     *fp8Dense
	// e4m3 is the bytes of a kernels.E4M3Decoded; row a kernels.NormalisedRow's norm;
	// swiGLU a kernels.SwiGLU's gate/up; qkv the kernels.WindowQKV of its query.
	e4m3   *value
	row    *normalisedRow
	swiGLU *value
	qkv    *windowQKV
	// placement is the kernels.TokenInCache or kernels.WindowInCache whose result it is.
	placement *placement
}

// known is v's origin, made empty where it has none.
func (v *value) known() *origin {
	if v.origin == nil {
		v.origin = &origin{}
	}
	return v.origin
}

// originOf is v's origin, an empty one where it has none.
func originOf(v *value) origin {
	if v == nil || v.origin == nil {
		return origin{}
	}
	return *v.origin
}

// partsOf is the partial sums whose rows sum to v (behind reshapes), nil if none.
func partsOf(v *value) *value {
	for ; v != nil; v = originOf(v).reshaped {
		if parts := originOf(v).parts; parts != nil {
			return parts
		}
	}
	return nil
}

// recordsOrigins reports whether b keeps what its kernels need to know of values
// (origin) and the operations the model names: with our GEMV (for FP8
// weights, fp8.go), fold, rope, norm or place kernels.
func (b *Backend) recordsOrigins() bool {
	return b.tritonGEMV != gemvNone || b.tritonFold || b.tritonRope || b.tritonNorm || b.tritonPlace
}

// recordOperand notes, where the backend records origins, that out is a reshape
// (reshaped) or a dtype conversion of x.
func (f *Function) recordOperand(out compute.Value, op compute.OpType, x compute.Value) {
	o, ok1 := out.(*value)
	xv, ok2 := x.(*value)
	if !f.builder.backend.recordsOrigins() || !ok1 || !ok2 {
		return
	}
	switch op {
	case compute.OpTypeReshape:
		o.known().reshaped = xv
	case compute.OpTypeConvertDType:
		o.known().converted = xv
	}
}

// denseProduct records, on the output of DotGeneral, the dense bfloat16 product of rows
// x [..., K] and w [N, K] (contracting x's last axis with w's axis 1, no batch axes)
// with a float32 output: model's Dense.ApplyFloat32, which normedProduct folds a norm
// into and residualProduct a residual add where x is one row (with tritonFold),
// whether or not our GEMV computes it, and after which normedRows
// computes the norm of several rows (with tritonNorm).
func (f *Function) denseProduct(out compute.Value, x, w compute.Value, xContracting, xBatch, wContracting, wBatch []int, config compute.DotGeneralConfig) {
	o, ok1 := out.(*value)
	xv, ok2 := x.(*value)
	wv, ok3 := w.(*value)
	if b := f.builder.backend; !(b.tritonFold || b.tritonNorm) || !ok1 || !ok2 || !ok3 || xv.shape.DType != dtypes.BFloat16 ||
		wv.shape.DType != dtypes.BFloat16 || wv.shape.Rank() != 2 || len(xBatch) != 0 || len(wBatch) != 0 ||
		config.OutputDType != dtypes.Float32 || !slices.Equal(xContracting, []int{xv.shape.Rank() - 1}) ||
		!slices.Equal(wContracting, []int{1}) || xv.shape.Dimensions[xv.shape.Rank()-1] != wv.shape.Dimensions[1] {
		return
	}
	o.known().x, o.origin.w, o.origin.config = xv, wv, config
}

// foldCandidate is a dense product of one row (denseProduct) whose weight has a 1-row
// GEMV tile t (gemvTile's), or such a product of FP8 bytes times its scale (of a
// kernels.FP8Dense; fp8Tile's), for the kernels that fold the work around it.
type foldCandidate struct {
	product *value
	scale   *value // the FP8 product's scale, nil for a bfloat16 product
	t       triton.Tile
}

// foldCandidate returns, with tritonFold, product as a foldCandidate with scale
// (nil for none), if it is one.
func (f *Function) foldCandidate(product, scale *value) (foldCandidate, bool) {
	o := originOf(product)
	if !f.builder.backend.tritonFold || o.w == nil || o.x.shape.Size() != o.w.shape.Dimensions[1] ||
		(scale != nil && e4m3Bytes(o.w) == nil) {
		return foldCandidate{}, false
	}
	w := o.w.shape.Dimensions
	tile := gemvTile
	if scale != nil {
		tile = fp8Tile
	}
	t, ok := tile(1, w[0], w[1])
	if !ok || t.Dot {
		return foldCandidate{}, false
	}
	return foldCandidate{product: product, scale: scale, t: t}, true
}

// kernelWeight is the StableHLO operands of c's weight as a fold kernel takes them
// (triton.Kernels.GEMVNorm and the others): W, and for an FP8 product its bytes and
// its scale as a float32 row [N], nil for a bfloat16 product. ws are the operands of
// c.product.origin.w and c.scale (nil for none), as f.operands gives them.
func (f *Function) kernelWeight(c foldCandidate, ws []*stablehlo.Value) (w, s *stablehlo.Value, err error) {
	if c.scale == nil {
		return ws[0], nil, nil
	}
	b, err := f.operands(e4m3Bytes(c.product.origin.w))
	if err != nil {
		return nil, nil, err
	}
	n := c.product.origin.w.shape.Dimensions[0]
	rows := xshapes.Make(dtypes.Float32, n)
	s = ws[1]
	if c.scale.shape.Size() == 1 {
		if s, err = stablehlo.Reshape(s, xshapes.Make(dtypes.Float32)); err == nil {
			s, err = stablehlo.BroadcastInDim(s, rows, nil)
		}
	}
	return b[0], s, err
}

// scaleOperand is c's scale as an operand list: none for a bfloat16 product.
func (c foldCandidate) scaleOperand() []compute.Value {
	if c.scale == nil {
		return nil
	}
	return []compute.Value{c.scale}
}

// normedProduct returns, with tritonFold, a kernels.NormedDense of one row as
// one Triton kernel (triton.Kernels.GEMVNorm): the norm and the product of its weight.
// The norm's own operations and the product it replaces are then left unused, for XLA
// to remove. ok is false, with nothing added, where the kernel does not take it.
func (f *Function) normedProduct(r *normedDense) (v compute.Value, ok bool, err error) {
	c, ok := f.foldCandidate(r.product, nil)
	if !ok || !r.takenByKernels() {
		return nil, false, nil
	}
	c.t = normTile(c.t, c.product.origin.w.shape.Dimensions[0])
	out, err := f.gemvNorm(c, r.x, r.gain, r.norm)
	return out, true, err
}

// takenByKernels reports whether our norm kernels compute r: its product a dense
// product (denseProduct) of X's rows rounded to bfloat16, a bfloat16 norm weight, and
// no scale (the kernels multiply by none).
func (r *normedDense) takenByKernels() bool {
	o := originOf(r.product)
	return r.scale == 1 && o.w != nil && r.gain.shape.DType == dtypes.BFloat16 &&
		slices.Equal(r.x.shape.Dimensions, o.x.shape.Dimensions)
}

// minNormPrograms is the fewest programs a 1-row GEMV with the norm of bfloat16 weights
// runs on its 8-row tile (normTile).
const minNormPrograms = 512

// normTile is the tile of a 1-row GEMV with the norm of a bfloat16 W of n rows: t,
// gemvTiles' for one row, or 4 rows where 8 would run fewer than minNormPrograms programs
// (as the PyTorch peer's q/k/v GEMV, and slightly faster). t's rows divide n, so 4 do too.
func normTile(t triton.Tile, n int) triton.Tile {
	if t.BN == 8 && n/t.BN < minNormPrograms {
		t.BN = 4
	}
	return t
}

// gemvNorm appends, for c's product of one row, the kernel of triton.Kernels.GEMVNorm
// that takes x (float32) and the norm weight g: the norm, the product of its weight
// (and for an FP8 product its scale) in one kernel, shaped as the product.
func (f *Function) gemvNorm(c foldCandidate, x, g *value, norm triton.Norm) (compute.Value, error) {
	rows := 1
	if parts := partsOf(x); parts != nil {
		x, rows = parts, parts.shape.Dimensions[0]
	}
	vs, err := f.operands(append([]compute.Value{x, g, c.product.origin.w}, c.scaleOperand()...)...)
	if err != nil {
		return nil, opError(compute.OpTypeMul, err)
	}
	w, s, err := f.kernelWeight(c, vs[2:])
	var row, y *stablehlo.Value
	if err == nil {
		row, err = stablehlo.Reshape(vs[0], xshapes.Make(dtypes.Float32, rows, c.product.origin.w.shape.Dimensions[1]))
	}
	if err == nil {
		y, err = f.builder.backend.kernels().GEMVNorm(row, vs[1], w, s, c.t, norm)
	}
	if err == nil {
		y, err = stablehlo.Reshape(y, toXLA(c.product.shape))
	}
	return f.result(compute.OpTypeMul, y, err)
}

// residualProduct returns, with tritonFold, a kernels.ResidualAdd as one
// Triton kernel (triton.Kernels.GEMVResidual) where its product is a dense product of
// one row (denseProduct), or an FP8 layer's (kernels.FP8Dense), that a fold kernel
// takes: model's residual adds after its o and down projections, whose sums then need
// no kernel of their own. That holds for o too, which tritonGEMV leaves to
// XLA's dot: once our GEMV with the norm reads the sum, XLA runs its dot and the add
// as two kernels. Where the product's input is a kernels.SwiGLU, the kernel computes
// that too (triton.Kernels.GEMVSwiGLUResidual). The product it replaces is left
// unused, for XLA to remove. ok is false, with nothing added, for every other sum.
func (f *Function) residualProduct(r *residualAdd) (v compute.Value, ok bool, err error) {
	product, scale := r.product, (*value)(nil)
	if fp8 := originOf(product).fp8; fp8 != nil {
		product, scale = fp8.product, fp8.scale
	}
	c, ok := f.foldCandidate(product, scale)
	if !ok || !r.residual.shape.Equal(product.shape) {
		return nil, false, nil
	}
	residual := r.residual
	x, w := product.origin.x, product.origin.w
	n, k := w.shape.Dimensions[0], w.shape.Dimensions[1]
	gu := originOf(x).swiGLU
	swiGLU := gu != nil && x.shape.DType == dtypes.BFloat16 && gu.shape.DType == dtypes.Float32
	input, inputShape := x, xshapes.Make(dtypes.BFloat16, 1, k)
	if swiGLU {
		input, inputShape = gu, xshapes.Make(dtypes.Float32, 1, 2*k)
	}
	residualRows := 1
	if parts := partsOf(residual); parts != nil && !swiGLU {
		residual, residualRows = parts, parts.shape.Dimensions[0]
	}
	b := f.builder.backend
	if preload := preloadTile(k); b.tritonPreload && b.tritonPDL && !swiGLU && c.scale == nil &&
		triton.CheckGEMV(1, n, k, preload, dtypes.Float32) == nil {
		c.t = preload
	}
	splits := b.downSplits
	if splits < 2 || !swiGLU || c.scale != nil || k%(splits*c.t.BK) != 0 {
		splits = 1
	}
	vs, err := f.operands(append([]compute.Value{input, residual, w}, c.scaleOperand()...)...)
	if err != nil {
		return nil, true, opError(compute.OpTypeAdd, err)
	}
	wv, s, err := f.kernelWeight(c, vs[2:])
	var row, sum *stablehlo.Value
	if err == nil {
		row, err = stablehlo.Reshape(vs[0], inputShape)
	}
	if err == nil {
		sum, err = stablehlo.Reshape(vs[1], xshapes.Make(dtypes.Float32, residualRows, n))
	}
	var y *stablehlo.Value
	switch {
	case err != nil:
	case splits > 1:
		return f.splitDown(product, row, wv, sum, c.t, splits)
	case swiGLU:
		y, err = f.builder.backend.kernels().GEMVSwiGLUResidual(row, wv, sum, s, c.t)
	default:
		y, err = f.builder.backend.kernels().GEMVResidual(row, wv, sum, s, c.t)
	}
	if err == nil {
		y, err = stablehlo.Reshape(y, toXLA(product.shape))
	}
	out, err := f.result(compute.OpTypeAdd, y, err)
	return out, true, err
}

// preloadTile is the tile of the o projection's GEMV with tritonPreload and
// tritonPDL: 2 rows of the whole K, one step, that each program loads before its PDL wait
// (triton.Kernels.Preload); the fastest measured. triton.CheckGEMV refuses it past K 2048.
func preloadTile(k int) triton.Tile { return triton.Tile{BN: 2, BK: k, Stages: 1} }

// splitDown appends the down GEMV with its K loop split over splits programs
// (triton.Kernels.GEMVSwiGLUSplit) and the sum of its parts' rows, in order, as the
// layer's output of product's shape, which records the parts: the kernels that read
// the output read the parts (partsOf), and XLA drops the sum where nothing else does.
func (f *Function) splitDown(product *value, gu, w, r *stablehlo.Value, t triton.Tile, splits int) (compute.Value, bool, error) {
	parts, err := f.builder.backend.kernels().GEMVSwiGLUSplit(gu, w, r, t, splits)
	var y *stablehlo.Value
	n := w.Shape().Dimensions[0]
	for i := 0; err == nil && i < splits; i++ {
		var row *stablehlo.Value
		if row, err = stablehlo.Slice(parts, []int{i, 0}, []int{i + 1, n}, []int{1, 1}); err != nil {
			break
		}
		if y == nil {
			y = row
		} else {
			y, err = stablehlo.Add(y, row)
		}
	}
	if err == nil {
		y, err = stablehlo.Reshape(y, toXLA(product.shape))
	}
	out, err := f.result(compute.OpTypeAdd, y, err)
	if err != nil {
		return nil, true, err
	}
	out.(*value).known().parts = f.wrap(parts)
	return out, true, nil
}
