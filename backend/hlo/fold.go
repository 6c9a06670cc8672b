//go:build cgo && !noxla

package hlo

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapeinference"
	"github.com/gomlx/go-xla/stablehlo"
	xshapes "github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// origin is how a value was made, kept (with option triton=fold, triton=rope or
// triton=norm) for normedProduct's recognition of a dense layer after an RMSNorm,
// residualProduct's of a residual add after one, rotatedQuery's of rotated queries
// (rope.go) and normedRows' of a dense layer of several rows after an RMSNorm
// (norm.go): the operation and its operands (unary and binary operations,
// concatenations, reductions with their axes), a constant scalar's value, or, for a
// dense product's output, its input, weight and configuration.
type origin struct {
	op     compute.OpType
	args   []*value
	axes   []int // a reduction's, a transpose's permutation, a broadcast's or a concatenation's axes
	starts []int // a slice's of strides 1, with limits
	limits []int
	scalar *float64 // a float32 or int32 constant scalar's
	x, w   *value   // a dense product's (denseProduct)
	config compute.DotGeneralConfig
	// e4m3 is the bytes a Gather decodes as FP8 E4M3FN values, e4m3Table whether a
	// constant is the table it decodes them with (fp8.go).
	e4m3      *value
	e4m3Table bool
	// parts is, for a layer's output that a split kernel computed (residualProduct),
	// its partial sums [splits, n], whose rows summed in order are the value: the
	// kernels that read the output read them instead (partsOf).
	parts *value
}

// partsOf is the partial sums whose rows sum to v (behind reshapes), nil if none.
func partsOf(v *value) *value {
	for ; v != nil && v.origin != nil; v = v.origin.args[0] {
		if v.origin.parts != nil {
			return v.origin.parts
		}
		if v.origin.op != compute.OpTypeReshape {
			return nil
		}
	}
	return nil
}

// recordsOrigins reports whether b keeps how values were made (origin): with option
// triton=gemv (for FP8 weights, fp8.go), triton=fold, triton=rope, triton=norm or
// triton=place, whose recognisers read it.
func (b *Backend) recordsOrigins() bool {
	return b.tritonGEMV != gemvNone || b.tritonFold || b.tritonRope || b.tritonNorm || b.tritonPlace
}

// record notes, where the backend records origins, that out was made by op from args.
func (f *Function) record(out compute.Value, op compute.OpType, args ...compute.Value) {
	v, ok := out.(*value)
	if !f.builder.backend.recordsOrigins() || !ok {
		return
	}
	o := &origin{op: op}
	for _, a := range args {
		av, ok := a.(*value)
		if !ok {
			return
		}
		o.args = append(o.args, av)
	}
	v.origin = o
}

// originOf is how out was made, nil when not recorded.
func originOf(out compute.Value) *origin {
	if v, ok := out.(*value); ok {
		return v.origin
	}
	return nil
}

// opOf is v's operation, or OpTypeInvalid when it was not recorded.
func opOf(v *value) compute.OpType {
	if v == nil || v.origin == nil {
		return compute.OpTypeInvalid
	}
	return v.origin.op
}

// throughShape follows v back through reshapes and broadcasts.
func throughShape(v *value) *value {
	for op := opOf(v); op == compute.OpTypeReshape || op == compute.OpTypeBroadcastInDim; op = opOf(v) {
		v = v.origin.args[0]
	}
	return v
}

// scalarOf is the value of a float32 constant scalar (behind reshapes and broadcasts).
func scalarOf(v *value) (float32, bool) {
	v = throughShape(v)
	if v == nil || v.origin == nil || v.origin.scalar == nil || v.shape.DType != dtypes.Float32 {
		return 0, false
	}
	return float32(*v.origin.scalar), true
}

// withScalar splits the operands of a binary operation into a float32 constant scalar
// and the other operand, either way round.
func withScalar(v *value) (other *value, c float32, ok bool) {
	a, b := v.origin.args[0], v.origin.args[1]
	if c, ok := scalarOf(b); ok {
		return a, c, true
	}
	if c, ok := scalarOf(a); ok {
		return b, c, true
	}
	return nil, 0, false
}

// invRMSOf recognises model's invRMS(x): rsqrt(Σx²·(1/K) + eps) over x's last axis,
// kept as [..., 1] (GoMLX's ReduceMean multiplies the sum by 1/K, AddScalar adds a
// constant), and returns x and its norm.
func invRMSOf(v *value) (x *value, norm triton.Norm, ok bool) {
	v = throughShape(v)
	if opOf(v) != compute.OpTypeRsqrt {
		return nil, norm, false
	}
	sum := v.origin.args[0]
	if opOf(sum) != compute.OpTypeAdd {
		return nil, norm, false
	}
	mean, eps, ok := withScalar(sum)
	if mean = throughShape(mean); !ok || opOf(mean) != compute.OpTypeMul {
		return nil, norm, false
	}
	total, invK, ok := withScalar(mean)
	if !ok || opOf(total) != compute.OpTypeReduceSum {
		return nil, norm, false
	}
	squares := total.origin.args[0]
	if opOf(squares) != compute.OpTypeMul || squares.origin.args[0] != squares.origin.args[1] {
		return nil, norm, false
	}
	x = squares.origin.args[0]
	if x.shape.DType != dtypes.Float32 || !slices.Equal(total.origin.axes, []int{x.shape.Rank() - 1}) {
		return nil, norm, false
	}
	return x, triton.Norm{InvK: invK, Eps: eps}, true
}

// normWeightedOf recognises model's normWeighted(ConvertDType(x, bfloat16), g): the
// product of x rounded to bfloat16 and the norm weight g [K] (behind a reshape), and
// returns g.
func normWeightedOf(v, x *value) (g *value, ok bool) {
	if opOf(v) != compute.OpTypeMul {
		return nil, false
	}
	for i, rounded := range v.origin.args {
		if opOf(rounded) != compute.OpTypeConvertDType || rounded.origin.args[0] != x ||
			rounded.shape.DType != dtypes.BFloat16 {
			continue
		}
		g = throughShape(v.origin.args[1-i])
		k := x.shape.Dimensions[x.shape.Rank()-1]
		if g.shape.DType == dtypes.BFloat16 && slices.Equal(g.shape.Dimensions, []int{k}) {
			return g, true
		}
	}
	return nil, false
}

// denseProduct records, on the output of DotGeneral, the dense bfloat16 product of rows
// x [..., K] and w [N, K] (contracting x's last axis with w's axis 1, no batch axes)
// with a float32 output: model's Dense.ApplyFloat32, which normedProduct folds a norm
// into and residualProduct a residual add where x is one row (with option
// triton=fold), whether or not our GEMV computes it, and after which normedRows
// computes the norm of several rows (with option triton=norm).
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
	o.origin = &origin{op: compute.OpTypeDotGeneral, x: xv, w: wv, config: config}
}

// foldCandidate is one way round of a binary operation's operands: product, a dense
// product of one row (denseProduct) whose weight has a 1-row GEMV tile t (gemvTile's),
// or such a product of FP8 bytes times its scale (scaledProductOf; fp8Tile's), and
// other.
type foldCandidate struct {
	product, other *value
	scale          *value // the FP8 product's scale, nil for a bfloat16 product
	t              triton.Tile
}

// foldCandidates lists, with option triton=fold, the ways round of lhs and rhs that
// are foldCandidates: none, one, or both when both are such products.
func (f *Function) foldCandidates(lhs, rhs compute.Value) []foldCandidate {
	if !f.builder.backend.tritonFold {
		return nil
	}
	l, ok1 := lhs.(*value)
	r, ok2 := rhs.(*value)
	if !ok1 || !ok2 {
		return nil
	}
	var cs []foldCandidate
	for _, pair := range [][2]*value{{l, r}, {r, l}} {
		product, scale, scaled := scaledProductOf(pair[0])
		if !scaled {
			product = pair[0]
		}
		if opOf(product) != compute.OpTypeDotGeneral || product.origin.w == nil ||
			product.origin.x.shape.Size() != product.origin.w.shape.Dimensions[1] {
			continue
		}
		w := product.origin.w.shape.Dimensions
		tile := gemvTile
		if scaled {
			tile = fp8Tile
		}
		if t, ok := tile(1, w[0], w[1]); ok && !t.Dot {
			cs = append(cs, foldCandidate{product: product, other: pair[1], scale: scale, t: t})
		}
	}
	return cs
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

// normedProduct returns, with option triton=fold, the product of lhs and rhs as one
// Triton kernel (triton.Kernels.GEMVNorm) when they are model's normed dense layer of one row:
// a dense product (denseProduct) of normWeighted(x, g) times invRMS(x), either way
// round. The norm's own operations and the product it replaces are then left unused,
// for XLA to remove. ok is false, with nothing added, for every other product.
func (f *Function) normedProduct(lhs, rhs compute.Value) (v compute.Value, ok bool, err error) {
	for _, c := range f.foldCandidates(lhs, rhs) {
		x, g, norm, ok := normedLayerOf(c.product, c.other)
		if !ok {
			continue
		}
		if c.scale == nil {
			c.t = normTile(c.t, c.product.origin.w.shape.Dimensions[0])
		}
		out, err := f.gemvNorm(c, x, g, norm)
		return out, true, err
	}
	return nil, false, nil
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

// normedLayerOf recognises model's normed dense layer (model/forward.go's normed) in
// a product of product, a dense product (denseProduct), and inv: normWeighted(x, g)
// times wᵀ, then times invRMS(x) of x's shape. It returns x, the norm weight g and the
// norm.
func normedLayerOf(product, inv *value) (x, g *value, norm triton.Norm, ok bool) {
	x, norm, ok = invRMSOf(inv)
	if !ok || !slices.Equal(x.shape.Dimensions, product.origin.x.shape.Dimensions) {
		return nil, nil, norm, false
	}
	if out, err := shapeinference.BinaryOp(compute.OpTypeMul, product.shape, inv.shape); err != nil || !out.Equal(product.shape) {
		return nil, nil, norm, false
	}
	g, ok = normWeightedOf(product.origin.x, x)
	return x, g, norm, ok
}

// swiGLUOf recognises model's swiGLU(gu) rounded to bfloat16, a dense product's input
// x: ConvertDType(Mul(Mul(gate, Logistic(gate)), up), bfloat16), each product either
// way round, gate and up the two halves of float32 gu's last axis. It returns gu.
func swiGLUOf(x *value) (gu *value, ok bool) {
	if opOf(x) != compute.OpTypeConvertDType || x.shape.DType != dtypes.BFloat16 {
		return nil, false
	}
	product := x.origin.args[0]
	if opOf(product) != compute.OpTypeMul {
		return nil, false
	}
	for i, silu := range product.origin.args {
		up := product.origin.args[1-i]
		if opOf(silu) != compute.OpTypeMul {
			continue
		}
		for j, gate := range silu.origin.args {
			sigmoid := silu.origin.args[1-j]
			if opOf(sigmoid) != compute.OpTypeLogistic || sigmoid.origin.args[0] != gate ||
				opOf(gate) != compute.OpTypeSlice || opOf(up) != compute.OpTypeSlice || gate.origin.args[0] != up.origin.args[0] {
				continue
			}
			gu = gate.origin.args[0]
			if gu.shape.DType == dtypes.Float32 && isHalf(gate, 0) && isHalf(up, 1) {
				return gu, true
			}
		}
	}
	return nil, false
}

// isHalf reports whether slice s (strides 1) takes half h (0 or 1) of its operand's
// last axis and all of its other axes.
func isHalf(s *value, h int) bool {
	dims := s.origin.args[0].shape.Dimensions
	if s.origin.starts == nil || len(dims) == 0 || dims[len(dims)-1]%2 != 0 {
		return false
	}
	last, half := len(dims)-1, dims[len(dims)-1]/2
	for axis, d := range dims {
		start, limit := 0, d
		if axis == last {
			start, limit = h*half, (h+1)*half
		}
		if s.origin.starts[axis] != start || s.origin.limits[axis] != limit {
			return false
		}
	}
	return true
}

// residualProduct returns, with option triton=fold, lhs + rhs as one Triton kernel
// (triton.Kernels.GEMVResidual) when one is a dense product of one row (denseProduct) and the
// other a float32 residual of its shape, either way round: model's residual adds after
// its o and down projections, whose sums then need no kernel of their own. That holds
// for o too, which option triton=gemv leaves to XLA's dot: once our GEMV with the
// norm reads the sum, XLA runs its dot and the add as two kernels. Where the product's input is swiGLU of the gate/up projection (swiGLUOf), the
// kernel computes that too (triton.Kernels.GEMVSwiGLUResidual). The product it replaces is
// left unused, for XLA to remove. ok is false, with nothing added, for every other
// sum.
func (f *Function) residualProduct(lhs, rhs compute.Value) (v compute.Value, ok bool, err error) {
	for _, c := range f.foldCandidates(lhs, rhs) {
		product, residual := c.product, c.other
		if !residual.shape.Equal(product.shape) {
			continue
		}
		x, w := product.origin.x, product.origin.w
		n, k := w.shape.Dimensions[0], w.shape.Dimensions[1]
		gu, swiGLU := swiGLUOf(x)
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
	return nil, false, nil
}

// preloadTile is the tile of the o projection's GEMV with options triton=preload and
// triton=pdl: 2 rows of the whole K, one step, that each program loads before its PDL wait
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
	out.(*value).origin = &origin{parts: f.wrap(parts)}
	return out, true, nil
}
