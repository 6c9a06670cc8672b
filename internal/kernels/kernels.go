package kernels

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/exceptions"
	"github.com/gomlx/gomlx/core/graph"
)

// Op is one of the named operations of this package, its values those of one graph.
type Op interface {
	// Name is the operation's name: its type's.
	Name() string
}

// Backend is a backend that runs some of the named operations as kernels of its own.
type Backend interface {
	// MarkKernel receives op, marked in a graph under construction: before the operation
	// that completes it, if it has one. It returns an error where op breaks this
	// package's contract (its values' shapes, a graph of another backend).
	MarkKernel(op Op) error
}

// Mark names op for g's backend, where that backend implements [Backend]; other
// backends ignore it. It panics, as graph functions do, where the backend finds that op
// breaks the contract.
func Mark(g *graph.Graph, op Op) {
	b, ok := g.Backend().(Backend)
	if !ok {
		return
	}
	if err := b.MarkKernel(op); err != nil {
		exceptions.Panicf("kernels: marking %s: %v", op.Name(), err)
	}
}

// Value is n's value on its graph's backend, nil for a nil n.
func Value(n *graph.Node) compute.Value {
	if n == nil {
		return nil
	}
	return graph.InternalBackendOutputs(n)[0]
}

// NormedDense is a dense layer of RMSNorm'd rows, the row's 1/rms applied to the
// layer's output (a per-row factor commutes with the product):
//
//	Product = bf16(X)·Gain · Wᵀ           float32 [..., N], modelcore.Dense.ApplyFloat32 (a DotGeneral)
//	Factor  = Scale / sqrt(mean(X², -1) + Eps)   float32 [..., 1]
//	output  = Product · Factor            completed by Mul(Product, Factor)
//
// for X float32 [..., K] (the residual stream), Gain the norm's weight [K] in the
// compute dtype and W [N, K] the layer's.
type NormedDense struct {
	X, Gain         compute.Value
	Product, Factor compute.Value
	Eps, Scale      float64
}

// NormalisedRow is RMSNorm'd rows, the input of a layer that takes them normalised
// (quant's FP8 layers, whose input scales were calibrated on such rows):
//
//	Row = bf16(X / sqrt(mean(X², -1) + Eps)) · Gain      in the compute dtype, [..., K]
//
// for X float32 [..., K] and Gain [K] in the compute dtype.
type NormalisedRow struct {
	Row, X, Gain compute.Value
	Eps          float64
}

// FP8Dense is an FP8 layer's output (quant.FP8Linear.ApplyFloat32):
//
//	Product = Input · E4M3(W)ᵀ            float32 [..., N] (a DotGeneral), W [N, K] bytes
//	Factor  = Scale broadcast to Product  Scale float32 [N] or a scalar
//	output  = Product · Factor            completed by Mul(Product, Factor)
//
// The weight's values are an [E4M3Decoded] where a backend may read its bytes; Input
// may be a [NormalisedRow].
type FP8Dense struct {
	Product, Scale, Factor compute.Value
}

// E4M3Decoded is FP8 E4M3FN bytes decoded exactly, without scale (quant's table
// decoder):
//
//	Values = E4M3FN value of each byte of Bytes   in any float dtype, Bytes' shape
//
// for Bytes uint8.
type E4M3Decoded struct {
	Values, Bytes compute.Value
}

// ResidualAdd is a residual add after a layer:
//
//	output = Residual + Product           float32, completed by Add(Residual, Product)
//
// for Residual float32 and Product of its shape, a layer's output: a [NormedDense]'s
// product's kind of DotGeneral (modelcore.Dense.ApplyFloat32), an [FP8Dense]'s output, or
// anything else (which leaves the add as it is). Its output is the next layer's
// residual stream, whose norm may be computed with the add.
type ResidualAdd struct {
	Residual, Product compute.Value
}

// SwiGLU is the down projection's input:
//
//	Value = bf16(silu(gate) · up)         [..., F] in the compute dtype
//
// where gate and up are the first and second halves of GateUp's last axis, float32
// [..., 2·F].
type SwiGLU struct {
	Value, GateUp compute.Value
}

// WindowQKV is the attention inputs of a window of w positions over its cache, taken
// from the fused q/k/v projection's rows:
//
//	Rows   [b, w, (heads+2·kvHeads)·d]    the projection's output in the compute dtype
//	Query  [b, heads, w, d]               rotate(Rows' first heads·d columns), BHSD
//	Keys   [b, w, kvHeads, d]             rotate(the next kvHeads·d columns)
//	Values [b, w, kvHeads, d]             the last kvHeads·d columns
//
// where rotate rotates each head with Cos and Sin [b, w, d/2] float32 (transformers'
// rotate_half: the first and second halves of a head form the pairs), in float32,
// rounded to the compute dtype.
type WindowQKV struct {
	Rows, Query, Keys, Values compute.Value
	Cos, Sin                  compute.Value
}

// TokenInCache is a one-token window's key (or value) placed in its cache slot, in
// every batch row or in those that write it:
//
//	Result[b, :, Start[b], :] = Token[b, 0, :, :]  where Written[b] > 0 (every row for
//	                                                  a nil Written); Cache elsewhere
//
// for Cache [b, kvHeads, s, d], Token [b, 1, kvHeads, d], Start and Written int32 [b].
type TokenInCache struct {
	Result, Cache, Token, Start, Written compute.Value
}

// WindowInCache is a window's keys (or values) placed in their cache slots, at batch 1:
//
//	Result[0, :, Start[0]+i, :] = Window[0, i, :, :]   for i < w; Cache elsewhere
//
// for Cache [1, kvHeads, s, d], Window [1, w, kvHeads, d] and Start int32 [1].
type WindowInCache struct {
	Result, Cache, Window, Start compute.Value
}

// Name implements [Op].
func (NormedDense) Name() string { return "NormedDense" }

// Name implements [Op].
func (NormalisedRow) Name() string { return "NormalisedRow" }

// Name implements [Op].
func (FP8Dense) Name() string { return "FP8Dense" }

// Name implements [Op].
func (E4M3Decoded) Name() string { return "E4M3Decoded" }

// Name implements [Op].
func (ResidualAdd) Name() string { return "ResidualAdd" }

// Name implements [Op].
func (SwiGLU) Name() string { return "SwiGLU" }

// Name implements [Op].
func (WindowQKV) Name() string { return "WindowQKV" }

// Name implements [Op].
func (TokenInCache) Name() string { return "TokenInCache" }

// Name implements [Op].
func (WindowInCache) Name() string { return "WindowInCache" }

// Values lists op's values, nil where optional and unset, for a backend's checks.
func Values(op Op) ([]compute.Value, error) {
	switch o := op.(type) {
	case NormedDense:
		return []compute.Value{o.X, o.Gain, o.Product, o.Factor}, nil
	case NormalisedRow:
		return []compute.Value{o.Row, o.X, o.Gain}, nil
	case FP8Dense:
		return []compute.Value{o.Product, o.Scale, o.Factor}, nil
	case E4M3Decoded:
		return []compute.Value{o.Values, o.Bytes}, nil
	case ResidualAdd:
		return []compute.Value{o.Residual, o.Product}, nil
	case SwiGLU:
		return []compute.Value{o.Value, o.GateUp}, nil
	case WindowQKV:
		return []compute.Value{o.Rows, o.Query, o.Keys, o.Values, o.Cos, o.Sin}, nil
	case TokenInCache:
		return []compute.Value{o.Result, o.Cache, o.Token, o.Start, o.Written}, nil
	case WindowInCache:
		return []compute.Value{o.Result, o.Cache, o.Window, o.Start}, nil
	}
	return nil, fmt.Errorf("kernels: %T is not an operation of this package", op)
}
