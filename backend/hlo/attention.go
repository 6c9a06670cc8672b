//go:build cgo && !noxla

package hlo

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"
	xshapes "github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// The fused attention runs as cuDNN's flash attention, through the custom calls that
// XLA's CUDA plugin implements for JAX (jax.nn.dot_product_attention with
// implementation="cudnn"; their backend config is XLA's CudnnfMHABackendConfig, in
// JSON). Unlike go-xla's backend, it takes more keys than queries and grouped key/value
// heads without copying them. The model asks for it only for windows without a cache:
// for the decoding steps' short windows over a cache it was slower than plain
// attention on the H200.

// cuDNN's forward attention targets, without and with an additive bias.
const (
	cudnnAttentionTarget     = "__cudnn$fmhaSoftmax"
	cudnnAttentionBiasTarget = "__cudnn$fmhaScaleBiasSoftmax"
)

// maxCuDNNHeadDim is the largest head dimension cuDNN's flash attention takes on every
// GPU (256 needs Hopper and cuDNN 9.5).
const maxCuDNNHeadDim = 128

// attentionShape is the shape of a fused attention: batch b, query heads and key/value
// heads, queries t, keys s, head dimension d.
type attentionShape struct{ b, heads, kvHeads, t, s, d int }

// newAttentionShape reads the shape of q [b, t, heads, d] and k [b, s, kvHeads, d]
// (BSHD), or q [b, heads, t, d] and k [b, kvHeads, s, d] (BHSD).
func newAttentionShape(q, k xshapes.Shape, layout compute.AttentionAxesLayout) (attentionShape, error) {
	if q.Rank() != 4 || k.Rank() != 4 {
		return attentionShape{}, fmt.Errorf("query %s and key %s must be rank 4", q, k)
	}
	qd, kd := q.Dimensions, k.Dimensions
	switch layout {
	case compute.AttentionAxesLayoutBSHD:
		return attentionShape{b: qd[0], t: qd[1], heads: qd[2], d: qd[3], s: kd[1], kvHeads: kd[2]}, nil
	case compute.AttentionAxesLayoutBHSD:
		return attentionShape{b: qd[0], heads: qd[1], t: qd[2], d: qd[3], kvHeads: kd[1], s: kd[2]}, nil
	}
	return attentionShape{}, fmt.Errorf("unknown layout %v", layout)
}

// FusedScaledDotProductAttention implements [compute.FusedOps] as cuDNN's flash
// attention, forward only (no states for a VJP), on a CUDA plugin: bfloat16 or float16
// query, key and value of the same dtype, head dimension a multiple of 8 up to
// maxCuDNNHeadDim, query heads a multiple of key/value heads (query head h uses
// key/value head h/(heads/kvHeads)), and as options a scale, an additive bias
// [b, heads, t, s] of the same dtype (its batch and head axes may be 1, broadcast by
// cuDNN), a boolean mask [t, s], [b, t, s] or [b, heads, t, s] (true: visible; its
// batch and head axes may be 1 too), which it turns into such a bias, or a causal mask
// when there are as many keys as queries. Its one state is cuDNN's softmax statistics:
// each query's log-sum-exp of its scaled (and biased) scores, [b, heads, t] float32, with
// which a caller can merge it with attention over more keys (there is no fused backward).
// It declines ([compute.ErrNotImplemented], so that the caller builds the attention of
// plain ops) other dtypes, sequence lengths, quantized products and a mask with a bias;
// shapes that disagree are errors. With tritonAttention, bfloat16 BHSD windows
// over more keys than queries with a bias or mask and no causal flag run as our Triton
// kernel instead (no state), and the other windows over more keys are declined.
func (f *Function) FusedScaledDotProductAttention(query, key, value compute.Value, layout compute.AttentionAxesLayout,
	options *compute.ScaledDotProductAttentionConfig) (compute.Value, []compute.Value, error) {
	op := compute.OpTypeFusedScaledDotProductAttention
	var cfg compute.ScaledDotProductAttentionConfig
	if options != nil {
		cfg = *options
	}
	if b := f.builder.backend; !b.buildOnly() && !b.plugin.IsCUDA() {
		return nil, nil, notImplemented(op)
	}
	if (cfg.Mask != nil && cfg.Bias != nil) || cfg.QuerySeqLen != nil || cfg.KeyValueSeqLen != nil || cfg.QuantizedMatmuls {
		return nil, nil, fmt.Errorf("hlo: %s: cuDNN takes a scale, an additive bias, a boolean mask or a causal mask, no other option: %w",
			op, compute.ErrNotImplemented)
	}
	operands := []compute.Value{query, key, value}
	switch {
	case cfg.Bias != nil:
		operands = append(operands, cfg.Bias)
	case cfg.Mask != nil:
		operands = append(operands, cfg.Mask)
	}
	vs, err := f.operands(operands...)
	if err != nil {
		return nil, nil, opError(op, err)
	}
	q, k, v := vs[0].Shape(), vs[1].Shape(), vs[2].Shape()
	if q.DType != dtypes.BFloat16 && q.DType != dtypes.Float16 {
		return nil, nil, fmt.Errorf("hlo: %s: cuDNN takes bfloat16 or float16, not %s: %w", op, q.DType, compute.ErrNotImplemented)
	}
	shape, err := newAttentionShape(q, k, layout)
	if err == nil {
		err = shape.check(q, k, v, cfg)
	}
	if err == nil && cfg.Mask != nil {
		vs[3], err = f.maskToBias(vs[3], shape, q.DType)
	}
	if err == nil && len(vs) == 4 {
		err = shape.checkBias(vs[3].Shape(), q.DType)
	}
	if err != nil {
		return nil, nil, opError(op, err)
	}
	scale := cfg.Scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(shape.d))
	}
	if a, ok := f.tritonAttention(shape, layout, vs, cfg.Causal, scale); ok {
		out, err := f.attentionByTriton(query, key, value, vs, a)
		return out, nil, err
	}
	if f.builder.backend.tritonAttention && shape.s > shape.t {
		// A window over more keys that the kernel does not take: the plain path, not
		// cuDNN's, which was slower there.
		return nil, nil, fmt.Errorf("hlo: %s: %d queries over %d keys outside our Triton kernel's shapes: %w",
			op, shape.t, shape.s, compute.ErrNotImplemented)
	}
	target := cudnnAttentionTarget
	if len(vs) == 4 {
		target = cudnnAttentionBiasTarget
	}
	config, err := cudnnAttentionConfig(shape, q.DType, layout, scale, cfg.Causal)
	if err != nil {
		return nil, nil, opError(op, err)
	}
	// Results: the output [b, heads, t, d], stored as the query is laid out; the softmax
	// statistics [b, heads, t] (the flash backward's; returned as the state); an empty
	// workspace.
	outLayout := []int{3, 2, 1, 0}
	if layout == compute.AttentionAxesLayoutBSHD {
		outLayout = []int{3, 1, 2, 0}
	}
	outs, err := stablehlo.CustomCallV2(target, config, vs, make([][]int, len(vs)),
		[]xshapes.Shape{
			xshapes.Make(q.DType, shape.b, shape.heads, shape.t, shape.d),
			xshapes.Make(dtypes.Float32, shape.b, shape.heads, shape.t),
			xshapes.Make(dtypes.Uint8, 0),
		},
		[][]int{outLayout, nil, nil})
	if err != nil {
		return nil, nil, opError(op, err)
	}
	out := outs[0]
	if layout == compute.AttentionAxesLayoutBSHD {
		out, err = stablehlo.Transpose(out, 0, 2, 1, 3) // a relabelling: the layout is BSHD's already
	}
	res, err := f.result(op, out, err)
	if err != nil {
		return nil, nil, err
	}
	return res, []compute.Value{f.wrap(outs[1])}, nil
}

// checkBias reports whether bias is not an additive bias cuDNN takes for an attention
// of shape s: [b or 1, heads or 1, t, s] in the operands' dtype.
func (s attentionShape) checkBias(bias xshapes.Shape, dtype dtypes.DType) error {
	d := bias.Dimensions
	if bias.DType != dtype || bias.Rank() != 4 || (d[0] != s.b && d[0] != 1) || (d[1] != s.heads && d[1] != 1) ||
		d[2] != s.t || d[3] != s.s {
		return fmt.Errorf("bias %s: want [%d or 1, %d or 1, %d, %d] %s", bias, s.b, s.heads, s.t, s.s, dtype)
	}
	return nil
}

// hiddenBias is the additive bias of hidden keys that maskToBias writes: JAX's for
// cuDNN (-2⁴¹ in bfloat16, -2¹⁵ in float16), finite and far below any score; JAX avoids
// infinities there for a cuDNN problem with subtracting two large negative values.
func hiddenBias(dtype dtypes.DType) float64 {
	if dtype == dtypes.Float16 {
		return -(1 << 15)
	}
	return -(1 << 41)
}

// maskToBias turns a boolean mask of an attention of shape s ([t, s], [b, t, s] or
// [b, heads, t, s], batch and head axes possibly 1) into the additive bias cuDNN takes:
// [b or 1, heads or 1, t, s] of dtype, 0 where visible and hiddenBias elsewhere.
func (f *Function) maskToBias(mask *stablehlo.Value, s attentionShape, dtype dtypes.DType) (*stablehlo.Value, error) {
	m := mask.Shape()
	if m.DType != dtypes.Bool || m.Rank() < 2 || m.Rank() > 4 {
		return nil, fmt.Errorf("mask %s: want a boolean [t, s], [b, t, s] or [b, heads, t, s]", m)
	}
	var dims []int
	switch d := m.Dimensions; m.Rank() {
	case 2:
		dims = []int{1, 1, d[0], d[1]}
	case 3: // [b, t, s]: the head axis goes between
		dims = []int{d[0], 1, d[1], d[2]}
	default:
		dims = d
	}
	if s.checkBias(xshapes.Make(dtype, dims...), dtype) != nil {
		return nil, fmt.Errorf("mask %s: want [%d, %d], [%d or 1, %d, %d] or [%d or 1, %d or 1, %d, %d]",
			m, s.t, s.s, s.b, s.t, s.s, s.b, s.heads, s.t, s.s)
	}
	mask, err := stablehlo.Reshape(mask, xshapes.Make(dtypes.Bool, dims...))
	if err != nil {
		return nil, err
	}
	zero, err := f.scalar(dtype, 0)
	if err != nil {
		return nil, err
	}
	hidden, err := f.scalar(dtype, hiddenBias(dtype))
	if err != nil {
		return nil, err
	}
	if zero, err = broadcastTo(zero, dims); err != nil {
		return nil, err
	}
	if hidden, err = broadcastTo(hidden, dims); err != nil {
		return nil, err
	}
	return stablehlo.Select(mask, zero, hidden)
}

// check reports what cuDNN's flash attention rejects in the operands of shape s.
func (s attentionShape) check(q, k, v xshapes.Shape, cfg compute.ScaledDotProductAttentionConfig) error {
	switch {
	case k.DType != q.DType || !v.Equal(k):
		return fmt.Errorf("key %s and value %s must have the same shape, and the query's dtype %s", k, v, q.DType)
	case s.b != k.Dimensions[0] || s.d != k.Dimensions[3]:
		return fmt.Errorf("query %s and key %s differ in batch or head dimension", q, k)
	case s.d%8 != 0 || s.d > maxCuDNNHeadDim:
		return fmt.Errorf("head dimension %d: cuDNN takes multiples of 8 up to %d", s.d, maxCuDNNHeadDim)
	case s.kvHeads == 0 || s.heads%s.kvHeads != 0:
		return fmt.Errorf("%d query heads are not groups of %d key/value heads", s.heads, s.kvHeads)
	case cfg.Causal && s.t != s.s:
		return fmt.Errorf("a causal mask over %d queries and %d keys is ambiguous: give it as a bias", s.t, s.s)
	}
	return nil
}

// cudnnAttentionConfig is the backend config of the forward custom call: XLA's
// GpuBackendConfig holding a CudnnfMHABackendConfig, in JSON (int64 fields as strings;
// XLA rejects fields its version lacks, such as older JAX's wait_on_operation_queues),
// with the scores' shape [b, heads, t, s] and the two products' dimension numbers for
// the operands' layout (row-major q, k, v in that layout; the scores P [b, heads, t, s]).
func cudnnAttentionConfig(s attentionShape, dtype dtypes.DType, layout compute.AttentionAxesLayout, scale float64, causal bool) (string, error) {
	type dotDims struct {
		LhsContracting []string `json:"lhs_contracting_dimensions"`
		RhsContracting []string `json:"rhs_contracting_dimensions"`
		LhsBatch       []string `json:"lhs_batch_dimensions"`
		RhsBatch       []string `json:"rhs_batch_dimensions"`
	}
	// bmm1: Q·Kᵀ, contracting the head dimension; bmm2: P·V, contracting the keys.
	bmm1 := dotDims{[]string{"3"}, []string{"3"}, []string{"0", "1"}, []string{"0", "1"}}
	bmm2 := dotDims{[]string{"3"}, []string{"2"}, []string{"0", "1"}, []string{"0", "1"}}
	if layout == compute.AttentionAxesLayoutBSHD {
		bmm1 = dotDims{[]string{"3"}, []string{"3"}, []string{"0", "2"}, []string{"0", "2"}}
		bmm2 = dotDims{[]string{"3"}, []string{"1"}, []string{"0", "1"}, []string{"0", "2"}}
	}
	elementType := "BF16"
	if dtype == dtypes.Float16 {
		elementType = "F16"
	}
	mask := "NO_MASK"
	if causal {
		mask = "CAUSAL"
	}
	dims := func(ds ...int) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = strconv.Itoa(d)
		}
		return out
	}
	config := map[string]any{
		"operation_queue_id": "0",
		"cudnn_fmha_backend_config": map[string]any{
			"algorithm": map[string]any{
				"algo_id": "0", "math_type": "TENSOR_OP_MATH", "tuning_knobs": map[string]string{"17": "1", "24": "0"},
				"is_cudnn_frontend": true, "workspace_size": "0",
			},
			"fmha_scale": scale,
			"intermediate_tensor_shape": map[string]any{
				"element_type":         elementType,
				"dimensions":           dims(s.b, s.heads, s.t, s.s),
				"layout":               map[string]any{"minor_to_major": dims(3, 2, 1, 0)},
				"is_dynamic_dimension": []bool{false, false, false, false},
			},
			"is_flash_attention":         true,
			"mask_type":                  mask,
			"dropout_rate":               0,
			"seed":                       42,
			"sliding_window_length":      0,
			"max_seg_per_batch":          1,
			"is_paged_attention":         false,
			"bmm1_dot_dimension_numbers": bmm1,
			"bmm2_dot_dimension_numbers": bmm2,
		},
	}
	text, err := json.Marshal(config)
	return string(text), err
}

// tritonAttention returns the shape of our Triton decode attention for an attention of
// shape s over the operands vs (q, k, v and any bias, checked), and whether the backend
// runs it there: with tritonAttention, for bfloat16 BHSD operands with a bias
// of the batch's rows, no causal mask, more keys than queries (a window over its
// cache) and the sizes triton.CheckAttention accepts (up to 64 query rows per
// key/value head), at every batch size: with the cache's in-place writes ordered
// after the kernel's read (model's attention), the kernels measured faster than the
// plain path at batches 1 to 64 on the H200.
func (f *Function) tritonAttention(s attentionShape, layout compute.AttentionAxesLayout, vs []*stablehlo.Value,
	causal bool, scale float64) (triton.Attention, bool) {
	if !f.builder.backend.tritonAttention || len(vs) != 4 || layout != compute.AttentionAxesLayoutBHSD || causal ||
		vs[0].Shape().DType != dtypes.BFloat16 || s.s <= s.t || vs[3].Shape().Dimensions[0] != s.b {
		return triton.Attention{}, false
	}
	a := triton.Attention{B: s.b, Heads: s.heads, KVHeads: s.kvHeads, T: s.t, S: s.s, D: s.d,
		BiasHeads: vs[3].Shape().Dimensions[1], Scale: scale}
	return a, triton.CheckAttention(a) == nil
}

// attentionByTriton runs the attention of a over vs (q, k, v and the bias) as our
// Triton kernels (triton.Kernels.AttentionOutput), with tritonRope on the rows the
// queries are rotated from where query is a kernels.WindowQKV's (rope.go), and with
// tritonPlace on the cache before a window's keys and values are placed in it, where
// key and value are its kernels.TokenInCache or kernels.WindowInCache (place.go): where
// a one-token window's are also written into the cache, the placements' values become
// the kernel's outputs, the cache with them written in place.
func (f *Function) attentionByTriton(query, key, value compute.Value, vs []*stablehlo.Value, a triton.Attention) (compute.Value, error) {
	op := compute.OpTypeFusedScaledDotProductAttention
	var c combiner
	lens, err := f.operands(c.do(f.visibleLengths(f.wrap(vs[3]), a)))
	if err == nil {
		err = c.err
	}
	if err != nil {
		return nil, opError(op, err)
	}
	queries, k, v := vs[:1], vs[1], vs[2]
	var placed []*stablehlo.Value
	keys, values, window := f.placementsOf(key, value, a)
	if rotated, withRotation, ok := f.rotatedQueries(query, a, window && a.T > 1); ok {
		queries, a = rotated, withRotation
		if window {
			var withPlace triton.Attention
			if keys, values, withPlace, ok = f.placedWindow(query, keys, values, a); ok {
				if k, v, placed, err = f.placedOperands(keys, values, withPlace); err != nil {
					return nil, opError(op, err)
				}
				a = withPlace
			}
		}
	}
	out, newK, newV, err := f.builder.backend.kernels().AttentionOutput(f.fn, queries, k, v, vs[3], lens[0], placed, a)
	if err != nil {
		return nil, opError(op, err)
	}
	if a.Write {
		keys.placed.v, values.placed.v = newK, newV
	}
	return f.wrap(out), nil
}

// visibleBias is the additive bias above which a key counts as visible: the hidden ones
// are far below (hiddenBias, or the caller's −1e30), real biases far above.
const visibleBias = -1e20

// visibleLengths returns, per batch row of the bias [B, BiasHeads, T, S] of a, one past
// the last key that any of its queries sees ([B] int32): the keys the Triton kernel
// reads.
func (f *Function) visibleLengths(bias compute.Value, a triton.Attention) (compute.Value, error) {
	var c combiner
	threshold, err := f.scalar(dtypes.BFloat16, visibleBias)
	if err != nil {
		return nil, err
	}
	one, err := f.scalar(dtypes.Int32, 1)
	if err != nil {
		return nil, err
	}
	zero, err := f.scalar(dtypes.Int32, 0)
	if err != nil {
		return nil, err
	}
	visible := c.do(f.GreaterThan(bias, f.wrap(threshold)))
	ends := c.do(f.Add(c.do(f.Iota(shapes.Make(dtypes.Int32, a.B, a.BiasHeads, a.T, a.S), 3)), f.wrap(one)))
	lens := c.do(f.ReduceMax(c.do(f.Where(visible, ends, f.wrap(zero))), 1, 2, 3))
	return lens, c.err
}

// combiner chains the backend's own ops, keeping the first error.
type combiner struct{ err error }

func (c *combiner) do(v compute.Value, err error) compute.Value {
	if c.err == nil {
		c.err = err
	}
	return v
}
