package modelcore

import (
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/blockdiff/blockdiff/internal/kernels"
)

// This file builds the operations of the forward pass that a backend may run as kernels
// of its own (package internal/kernels has the contract), one function each: each
// builds the plain decomposition every backend runs and names it for the backend.
// Package quant names its FP8 layers' (kernels.FP8Dense, kernels.E4M3Decoded).

// normedDense is the dense layer that dense applies (model.Dense.ApplyFloat32) to
// rmsNorm(x)·weight·scale, the row's 1/rms and scale applied to its float32 output
// instead of its input (a per-row factor commutes with the product): the input is then
// x·weight alone, which XLA can fuse into the GEMM, and the mean of squares a reduction
// of its own. kernels.NormedDense.
func normedDense(x, weight *Node, eps, scale float64, compute dtypes.DType, dense func(*Node) *Node) *Node {
	inv := invRMS(x, eps)
	if scale != 1 {
		inv = MulScalar(inv, scale)
	}
	product := dense(normWeighted(ConvertDType(x, compute), weight))
	kernels.Mark(x.Graph(), kernels.NormedDense{X: kernels.Value(x), Gain: kernels.Value(weight),
		Product: kernels.Value(product), Factor: kernels.Value(inv), Eps: eps, Scale: scale})
	return Mul(product, inv)
}

// normalisedRow is rmsNorm(x, weight, eps) in the compute dtype, the input of a layer
// that takes it normalised. kernels.NormalisedRow.
func normalisedRow(x, weight *Node, eps float64, compute dtypes.DType) *Node {
	row := rmsNorm(x, weight, eps, compute)
	kernels.Mark(x.Graph(), kernels.NormalisedRow{Row: kernels.Value(row), X: kernels.Value(x),
		Gain: kernels.Value(weight), Eps: eps})
	return row
}

// residualAdd returns the residual stream x plus a layer's output y·scale in x's dtype.
// kernels.ResidualAdd.
func residualAdd(x, y *Node, scale float64) *Node {
	y = scaledLike(x, y, scale)
	kernels.Mark(x.Graph(), kernels.ResidualAdd{Residual: kernels.Value(x), Product: kernels.Value(y)})
	return Add(x, y)
}

// swiGLUInput is swiGLU(gateUp) rounded to the compute dtype: the down projection's
// input. kernels.SwiGLU.
func swiGLUInput(gateUp *Node, compute dtypes.DType) *Node {
	h := ConvertDType(swiGLU(gateUp), compute)
	kernels.Mark(gateUp.Graph(), kernels.SwiGLU{Value: kernels.Value(h), GateUp: kernels.Value(gateUp)})
	return h
}

// windowQKV names the attention inputs that [Model.attention] took from the fused
// q/k/v rows qkv [b, w, ·]: the queries q [b, heads, w, d] (rotated by rope, BHSD), the
// window's keys k (rotated) and values v [b, w, kvHeads, d]. kernels.WindowQKV.
func windowQKV(qkv, q, k, v *Node, rope rotary) {
	kernels.Mark(qkv.Graph(), kernels.WindowQKV{Rows: kernels.Value(qkv), Query: kernels.Value(q),
		Keys: kernels.Value(k), Values: kernels.Value(v), Cos: kernels.Value(rope.rowCos), Sin: kernels.Value(rope.rowSin)})
}

// tokenInCache is [placeToken]'s cache with a one-token window's key (or value) in its
// slot. kernels.TokenInCache.
func tokenInCache(cache, x, start, n *Node) *Node {
	placed := placeToken(cache, x, start, n)
	kernels.Mark(x.Graph(), kernels.TokenInCache{Result: kernels.Value(placed), Cache: kernels.Value(cache),
		Token: kernels.Value(x), Start: kernels.Value(start), Written: kernels.Value(n)})
	return placed
}

// windowInCache is [writeSlots]'s cache with a window's keys (or values) in their
// slots, at batch 1. kernels.WindowInCache.
func windowInCache(cache, x, start *Node) *Node {
	placed := writeSlots(cache, x, start)
	kernels.Mark(x.Graph(), kernels.WindowInCache{Result: kernels.Value(placed), Cache: kernels.Value(cache),
		Window: kernels.Value(x), Start: kernels.Value(start)})
	return placed
}
