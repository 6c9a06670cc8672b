package modelcore

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// Window is the input of one forward pass: for each row of the batch, w consecutive
// tokens starting at an absolute position, run against that row's cache.
type Window struct {
	// Tokens [b, w] int32.
	Tokens *Node
	// Start [b] int32: the position of Tokens[:, 0]. Position p's keys and values
	// belong in cache slot p: a window that reads the cache must lie within it, its
	// slots [Start, Start+w) at or past CacheLen (a one-token window over a small
	// cache attends over a copy of it that holds its key in slot Start; on backends
	// that fuse elementwise work, other windows that write put their keys in their
	// slots, see WriteLen, and at batch 1 on backends that place windows
	// (backend.PlacesWindows) those that write nothing attend over a copy that holds
	// theirs).
	Start *Node
	// CacheLen [b] int32: cache slots below it hold earlier positions and are attended
	// to. Nil when the cache is not read (a prefill into an empty cache).
	CacheLen *Node
	// WriteLen [b] int32: keys and values of the first WriteLen tokens are written to
	// cache slots [Start, Start+WriteLen); nil writes nothing. At batch 1 on backends
	// that fuse elementwise work, a window of several tokens that reads and writes the
	// cache also leaves its other tokens' keys and values in their slots, past the
	// committed length: a later window over those slots writes its own before
	// attending to them. (At larger batches such keys are removed again, see [Cache].)
	WriteLen *Node
	// BlockSize of block-causal attention: position p sees position q iff
	// q/BlockSize <= p/BlockSize (1 is causal attention).
	BlockSize int
	// LogitIndices [b, r] int32 selects the window positions whose logits are
	// computed; nil computes them all.
	LogitIndices *Node
}

// ObserveFunc receives the input of each linear layer during graph construction,
// e.g. to record its range for calibration.
type ObserveFunc func(linear string, input *Node)

// Forward builds the forward pass of a window against a cache (nil when the window
// does not use one). It returns the logits [b, r, v] in float32 and the updated cache.
// observe, when not nil, sees each linear layer's input.
func (m *Model) Forward(w *Weights, win Window, cache *CacheNodes, observe ObserveFunc) (*Node, *CacheNodes) {
	cfg := m.Config
	x := Gather(w.Embed, InsertAxes(win.Tokens, -1)) // [b, w, h]
	if s := cfg.embedScale(); s != 1 {
		x = MulScalar(x, s)
	}
	// The residual stream accumulates in float32 whatever the compute dtype: it is
	// small, and keeping it out of bfloat16 about halves the bf16 logits' error on the
	// fixtures.
	compute := x.DType()
	x = ConvertDType(x, dtypes.Float32)
	pos := positions(win.Start, win.Tokens.Shape().Dimensions[1])
	rope := newRotary(w.RopeInvFreq, pos, cfg.RopeAttentionFactor)
	paths := m.paths
	if w.tp != nil {
		paths = paths.tensorParallel()
	}
	mask := attentionMask(win, pos, cache, paths.fuses, paths.placesWindows)
	if mask.cache == nil && paths.prefill.useFused(compute, m.backend) {
		byParts := win.Tokens.Shape().Dimensions[1] >= paths.partsFrom && paths.logSumExp
		mask.fused = newFusedMasks(mask.window, win.BlockSize == 1, byParts, pos, win.BlockSize)
	}
	if paths.fusedOverCache {
		mask.overCache = overCacheMasks(mask)
	}
	paramsOf := func(name string, lin Linear, x *Node) []*Node {
		if observe != nil {
			observe(name, x)
		}
		return w.Nodes(lin.Params())
	}
	// apply runs a linear layer on x rounded to the compute dtype and returns float32
	// outputs where the layer can (no rounding before the float32 elementwise work).
	apply := func(name string, lin Linear, x *Node) *Node {
		x = ConvertDType(x, compute)
		if f, ok := lin.(Float32Linear); ok {
			return f.ApplyFloat32(x, paramsOf(name, lin, x))
		}
		return ConvertDType(lin.Apply(x, paramsOf(name, lin, x)), dtypes.Float32)
	}

	// normed runs lin on rmsNorm(x)·weight·scale: for dense layers as normedDense, the
	// row's 1/rms on the output; quantized layers (their activation scales were
	// calibrated on normalised inputs) and calibration itself keep the normalised input.
	normed := func(name string, lin Linear, x, weight *Node, scale float64) *Node {
		if _, dense := lin.(*Dense); !dense || observe != nil {
			h := normalisedRow(x, weight, cfg.RMSNormEps, compute)
			if scale != 1 {
				h = MulScalar(h, scale)
			}
			return apply(name, lin, h)
		}
		return normedDense(x, weight, cfg.RMSNormEps, scale, compute, func(h *Node) *Node { return apply(name, lin, h) })
	}

	var newCache *CacheNodes
	if cache != nil {
		newCache = &CacheNodes{K: make([]*Node, cfg.NumLayers), V: make([]*Node, cfg.NumLayers)}
	}
	residualScale := cfg.residualScale()
	for i, layer := range m.Layers {
		qkv := ConvertDType(normed(linearName(i, "self_attn.qkv_proj"), layer.QKV, x, w.Node(layer.AttnNorm), 1), compute)
		var layerCache *layerKV
		if cache != nil {
			layerCache = &layerKV{k: cache.K[i], v: cache.V[i]}
		}
		attn, kv := m.attention(qkv, w.tp, rope, mask, win, layerCache)
		if cache != nil {
			newCache.K[i], newCache.V[i] = kv.k, kv.v
		}
		x = residualAdd(x, apply(linearName(i, "self_attn.o_proj"), layer.O, attn), residualScale)

		gateUp := normed(linearName(i, "mlp.gate_up_proj"), layer.GateUp, x, w.Node(layer.MLPNorm), 1)
		var act *Node
		if w.tp != nil {
			act = ConvertDType(groupedSwiGLU(gateUp, w.tp.Devices), compute)
		} else {
			act = swiGLUInput(gateUp, compute)
		}
		x = residualAdd(x, apply(linearName(i, "mlp.down_proj"), layer.Down, act), residualScale)
	}

	if win.LogitIndices != nil {
		x = takeRows(x, win.LogitIndices)
	}
	logits := normed("lm_head", m.Head, x, w.Node(m.FinalNorm), cfg.logitScale())
	return logits, newCache
}

// positions returns the absolute positions [b, w] of a window starting at start [b].
func positions(start *Node, width int) *Node {
	g := start.Graph()
	offsets := Iota(g, shapes.Make(dtypes.Int32, 1, width), 1)
	return Add(InsertAxes(start, -1), offsets)
}

// takeRows gathers x[b, idx[b, r], ...] for x [b, w, ...] and idx [b, r].
func takeRows(x, idx *Node) *Node {
	g := x.Graph()
	b, r := idx.Shape().Dimensions[0], idx.Shape().Dimensions[1]
	rows := BroadcastToDims(Iota(g, shapes.Make(dtypes.Int32, b, 1), 0), b, r)
	return Gather(x, Stack([]*Node{rows, ConvertDType(idx, dtypes.Int32)}, -1))
}

// scaledLike returns y·scale in x's dtype.
func scaledLike(x, y *Node, scale float64) *Node {
	y = ConvertDType(y, x.DType())
	if scale != 1 {
		y = MulScalar(y, scale)
	}
	return y
}

// rmsNorm normalises the float32 x [..., h], then scales by weight [h] in the compute
// dtype, as transformers' LlamaRMSNorm does.
func rmsNorm(x, weight *Node, eps float64, compute dtypes.DType) *Node {
	return normWeighted(ConvertDType(Mul(x, invRMS(x, eps)), compute), weight)
}

// invRMS is each row's 1/sqrt(mean(x²) + eps), [..., 1].
func invRMS(x *Node, eps float64) *Node {
	return Rsqrt(AddScalar(ReduceAndKeep(Square(x), ReduceMean, -1), eps))
}

// normWeighted multiplies x [..., h] by a norm's weight [h] in x's dtype.
func normWeighted(x, weight *Node) *Node {
	dims := make([]int, x.Rank())
	for i := range dims {
		dims[i] = 1
	}
	dims[len(dims)-1] = weight.Shape().Dimensions[0]
	return Mul(x, Reshape(ConvertDType(weight, x.DType()), dims...))
}

// groupedSwiGLU computes silu(gate)·up from the fused projection of a tensor-parallel
// program, [..., groups·2·f/groups]: each group (a device's share) holds its gate
// columns, then its up columns (sharding.TensorParallel.GateUp). The result is in the
// FFN's column order, [..., f].
func groupedSwiGLU(gateUp *Node, groups int) *Node {
	dims := gateUp.Shape().Dimensions
	lead, local := dims[:len(dims)-1], dims[len(dims)-1]/(2*groups)
	x := Reshape(gateUp, append(append([]int{}, lead...), groups, 2, local)...)
	half := func(i int) *Node {
		return Reshape(SliceAxis(x, -2, AxisRange(i, i+1)), append(append([]int{}, lead...), groups*local)...)
	}
	gate, up := half(0), half(1)
	return Mul(Mul(gate, Sigmoid(gate)), up)
}

// swiGLU computes silu(gate)·up from the fused [..., 2·f] projection.
func swiGLU(gateUp *Node) *Node {
	f := gateUp.Shape().Dimensions[gateUp.Rank()-1] / 2
	gate := SliceAxis(gateUp, -1, AxisRange(0, f))
	up := SliceAxis(gateUp, -1, AxisRange(f, 2*f))
	return Mul(Mul(gate, Sigmoid(gate)), up)
}
