package modelcore

import (
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/sharding"
)

// prefillAttention selects how a window that reads no cache (a prefill into an empty
// cache, or [Model.Logits]) computes attention (paths.prefill). Windows that read a
// cache always use the plain path.
type prefillAttention int

const (
	// prefillAuto, the default, asks for the backend's fused attention when the compute
	// dtype is bfloat16, except on the Go backend (see backend.AsksForFusedAttention),
	// and uses the plain path otherwise. On XLA's CUDA plugin, through XLA's backend or
	// ours ("bdxla"), the fused op is cuDNN flash attention; XLA's CPU plugin declines it
	// and the plain path runs. On ours, windows of 1024 tokens or more run cuDNN's causal
	// attention and add each query's later keys in its block (see [mergeLaterKeys]).
	// Float32 models keep the plain path (cuDNN's is half-precision only). The Go
	// backend's fused op (float32 only) is a scalar loop, 7-10x slower than the plain
	// path on a 512-token prefill.
	prefillAuto prefillAttention = iota
	// prefillFused asks for the fused op on any backend and compute dtype, still falling
	// back to the plain path where the backend declines it (tests).
	prefillFused
	// prefillPlain always uses the plain path: float32 scores [b, kvHeads, w, group, w]
	// materialised and masked, softmax in float32 (tests).
	prefillPlain
)

// String returns "auto", "fused" or "plain".
func (p prefillAttention) String() string {
	switch p {
	case prefillAuto:
		return "auto"
	case prefillFused:
		return "fused"
	case prefillPlain:
		return "plain"
	}
	return "prefillAttention(?)"
}

// useFused reports whether a window without a cache read asks for the fused op.
func (p prefillAttention) useFused(dtype dtypes.DType, b compute.Backend) bool {
	switch p {
	case prefillFused:
		return true
	case prefillAuto:
		return dtype.IsHalfPrecision() && backend.AsksForFusedAttention(b)
	}
	return false
}

// paths are the forward pass's choices that depend on the backend, read from it once
// when the model is made (pathsOf); tests set them to take one backend's paths on
// another (the Go backend's tests cover XLA's so).
type paths struct {
	// fuses has windows over the cache take the paths of backends that fuse elementwise
	// work (backend.FusesElementwise; see [inSlots] and [inOwnSlot]).
	fuses bool
	// placesWindows has windows at batch 1 that write nothing attend over a copy of the
	// cache holding their keys in their slots (backend.PlacesWindows; see [inSlots]).
	placesWindows bool
	// fusedOverCache has windows over the cache in their slots ask for the fused
	// attention (backend.FusedAttentionOverCache; see [masks]).
	fusedOverCache bool
	// prefill is how windows that read no cache attend.
	prefill prefillAttention
	// logSumExp: the backend's fused attention returns its log-sum-exps
	// (backend.AttentionLogSumExp), so that prefills of partsFrom positions or more
	// (byPartsMinWindow) run by parts ([mergeLaterKeys]).
	logSumExp bool
	partsFrom int
}

// tensorParallel returns the paths of a tensor-parallel program: the plain attention
// everywhere, since XLA's partitioner sees through plain operations only, and go-xla's
// backend, the one that partitions, runs none of our kernels.
func (p paths) tensorParallel() paths {
	p.placesWindows, p.fusedOverCache, p.prefill = false, false, prefillPlain
	return p
}

// pathsOf is the paths of a model on b.
func pathsOf(b compute.Backend) paths {
	return paths{fuses: backend.FusesElementwise(b), placesWindows: backend.PlacesWindows(b),
		fusedOverCache: backend.FusedAttentionOverCache(b), prefill: prefillAuto,
		logSumExp: backend.AttentionLogSumExp(b), partsFrom: byPartsMinWindow}
}

// rotary holds cos and sin [b, w, 1, headDim/2] for a window's positions, in float32,
// and the same [b, w, headDim/2] (rowCos, rowSin) as kernels.WindowQKV takes them.
type rotary struct{ cos, sin, rowCos, rowSin *Node }

// newRotary computes the rotation angles pos·invFreq in float32, as transformers does,
// at any position.
func newRotary(invFreq, pos *Node, attentionFactor float64) rotary {
	half := invFreq.Shape().Dimensions[0]
	angles := Mul(InsertAxes(ConvertDType(pos, dtypes.Float32), -1), Reshape(invFreq, 1, 1, half)) // [b, w, d/2]
	cos, sin := Cos(angles), Sin(angles)
	if attentionFactor != 1 {
		cos, sin = MulScalar(cos, attentionFactor), MulScalar(sin, attentionFactor)
	}
	return rotary{cos: InsertAxes(cos, 2), sin: InsertAxes(sin, 2), rowCos: cos, rowSin: sin}
}

// apply rotates x [b, w, heads, d] with the rotate_half convention: the first and
// second halves of each head form the pairs.
func (r rotary) apply(x *Node) *Node {
	half := x.Shape().Dimensions[3] / 2
	x32 := ConvertDType(x, dtypes.Float32)
	x1 := SliceAxis(x32, -1, AxisRange(0, half))
	x2 := SliceAxis(x32, -1, AxisRange(half, 2*half))
	out := Concatenate([]*Node{
		Sub(Mul(x1, r.cos), Mul(x2, r.sin)),
		Add(Mul(x2, r.cos), Mul(x1, r.sin)),
	}, -1)
	return ConvertDType(out, x.DType())
}

// masks are the visibility masks of a window's queries.
type masks struct {
	window *Node // [b, 1, w, 1, w] bool: query (axis 2) sees window key (axis 4)
	cache  *Node // [b, 1, 1, 1, s] bool: cache slot visible; nil without a cache
	// inSlots, when not nil, is the visibility [b, 1, w, 1, s] of the cache holding
	// the window's keys in their slots (see [inSlots]): the cache's visible slots and
	// the window's, block-causal.
	inSlots *Node
	// ownSlot, when not nil, is the visibility [b, 1, 1, 1, s] of the cache with a
	// one-token window's key in its own slot (see [inOwnSlot]): the cache's visible
	// slots and Start.
	ownSlot *Node
	// fused, when not nil, asks attention for the backend's fused op (a window that
	// reads no cache, see [prefillAttention]).
	fused *fusedMasks
	// overCache, when not nil, asks attention for the backend's fused op over the cache
	// holding the window's keys in their slots (inSlots or ownSlot as its mask [b, w,
	// s], see [overCacheMasks]), where the backend offers a kernel for it
	// (backend.FusedAttentionOverCache).
	overCache *fusedMasks
}

// fusedMasks are the block-causal mask in the forms the fused op takes, built once per
// forward and shared by the layers.
type fusedMasks struct {
	mask *Node // [b, w, n] bool: query sees key (n: the window's keys, or the cache's slots)
	// causal: BlockSize 1, where the block-causal mask is the op's own causal mask.
	causal bool
	bias   *Node // mask as an additive bias, built on first use
	// laterKeys, when not nil, has the attention run as causal attention merged with
	// the keys later in each query's block (see [mergeLaterKeys]): for each shift t in
	// 1..BlockSize-1, [b, w] bool: the key t positions after the query is in its block.
	laterKeys []*Node
}

// newFusedMasks takes the window mask [b, 1, w, 1, w] of [attentionMask]; with
// byParts, the window's positions pos [b, w] and blockSize set up laterKeys.
func newFusedMasks(window *Node, causal, byParts bool, pos *Node, blockSize int) *fusedMasks {
	dims := window.Shape().Dimensions
	f := &fusedMasks{mask: Reshape(window, dims[0], dims[2], dims[4]), causal: causal}
	if byParts && !causal {
		w := dims[2]
		block := DivScalar(pos, float64(blockSize))
		for t := 1; t < blockSize && t < w; t++ {
			// pos is consecutive within the window: the key t after is at pos + t.
			later := Equal(DivScalar(AddScalar(pos, float64(t)), float64(blockSize)), block)
			inWindow := LessThan(Iota(pos.Graph(), shapes.Make(dtypes.Int32, 1, w), 1), Const(pos.Graph(), int32(w-t)))
			f.laterKeys = append(f.laterKeys, LogicalAnd(later, inWindow))
		}
	}
	return f
}

// overCacheMasks returns the mask [b, w, s] of a window that attends over the cache
// holding its keys in their slots (m.inSlots or m.ownSlot, [b, 1, w, 1, s]) in the form
// the fused op takes, or nil when the window attends otherwise. At every batch size:
// the backend declines the shapes its kernel does not gain on (our Triton kernels at
// batches from 2 to 31 with 2 key/value heads, see backend/hlo), and the window then
// takes the plain path.
func overCacheMasks(m masks) *fusedMasks {
	visible := m.inSlots
	if visible == nil {
		visible = m.ownSlot
	}
	if visible == nil {
		return nil
	}
	dims := visible.Shape().Dimensions
	return &fusedMasks{mask: Reshape(visible, dims[0], dims[2], dims[4])}
}

// byPartsMinWindow is the shortest window whose block-causal attention runs as causal
// attention plus the keys later in each block ([mergeLaterKeys]): cuDNN takes the
// block-causal mask only as a bias and then computes every tile, twice the work at 2048.
const byPartsMinWindow = 1024

// fusedMaskedBias is the additive bias of hidden keys on the fused path: finite (no
// inf − inf in a kernel's max subtraction), far below any score, and representable in
// bfloat16 and float32.
const fusedMaskedBias = -1e30

// additiveBias returns the mask as an additive bias [b, heads, w, n] in dtype (0 where
// visible, fusedMaskedBias elsewhere): XLA's cuDNN lowering takes exactly the query's
// shape and dtype, no broadcasting.
func (f *fusedMasks) additiveBias(heads int, dtype dtypes.DType) *Node {
	if f.bias == nil {
		g := f.mask.Graph()
		zero, hidden := shapes.CastAsDType(0, dtype), shapes.CastAsDType(fusedMaskedBias, dtype)
		bias := Where(f.mask, Const(g, zero), Const(g, hidden)) // Const, not Scalar: see [Weights.While]
		dims := f.mask.Shape().Dimensions
		f.bias = BroadcastToDims(InsertAxes(bias, 1), dims[0], heads, dims[1], dims[2])
	}
	return f.bias
}

// attentionMask builds the block-causal mask within the window and the length mask of
// the cache. Cache slots are earlier blocks, so all valid ones are visible. fuses is
// whether the backend fuses elementwise work (see [inOwnSlot]), placesWindows whether
// it places windows' keys and values itself (backend.PlacesWindows): then windows at
// batch 1 that write nothing attend over the cache holding their keys in their slots
// too (see [inSlots]), and one-token windows take their own slot over a cache of any
// size (see [inOwnSlot]).
func attentionMask(win Window, pos *Node, cache *CacheNodes, fuses, placesWindows bool) masks {
	g := pos.Graph()
	block := DivScalar(pos, float64(win.BlockSize)) // positions are non-negative: truncation is floor
	if win.BlockSize == 1 {
		block = pos
	}
	var m masks
	m.window = LessOrEqual(InsertAxes(block, 1), InsertAxes(block, -1)) // [b, q, k]
	m.window = InsertAxes(InsertAxes(m.window, 1), 3)
	if cache != nil && win.CacheLen != nil {
		s := cache.K[0].Shape().Dimensions[2]
		slots := Iota(g, shapes.Make(dtypes.Int32, 1, s), 1)
		m.cache = LessThan(slots, InsertAxes(win.CacheLen, -1)) // [b, s]
		b, w := pos.Shape().Dimensions[0], pos.Shape().Dimensions[1]
		switch {
		case fuses && inOwnSlot(cache.K[0].Shape(), w, placesWindows):
			m.ownSlot = LogicalOr(m.cache, Equal(slots, InsertAxes(win.Start, -1)))
			m.ownSlot = Reshape(m.ownSlot, b, 1, 1, 1, s)
		case fuses && (win.WriteLen != nil || placesWindows && b == 1) && inSlots(b, w):
			// Slot i holds position i: the window's slots are seen block-causally.
			slotBlock := DivScalar(slots, float64(win.BlockSize))
			if win.BlockSize == 1 {
				slotBlock = slots
			}
			start := InsertAxes(win.Start, -1)
			inWindow := LogicalAnd(GreaterOrEqual(slots, start), LessThan(slots, AddScalar(start, float64(w)))) // [b, s]
			seen := LessOrEqual(InsertAxes(slotBlock, 1), InsertAxes(block, -1))                                // [b, w, s]
			m.inSlots = LogicalOr(InsertAxes(m.cache, 1), LogicalAnd(InsertAxes(inWindow, 1), seen))
			m.inSlots = Reshape(m.inSlots, b, 1, w, 1, s)
		}
		m.cache = Reshape(m.cache, b, 1, 1, 1, s)
	}
	return m
}

// layerKV is one layer's cache.
type layerKV struct{ k, v *Node }

// attention runs grouped-query attention for the fused q/k/v projection qkv [b, w, ·]
// and returns its output [b, w, heads·d] and the layer's updated cache.
//
// tp, when set, is the plan of a tensor-parallel program: qkv's rows then lie device
// after device ([groupedQKV]) and the key/value heads are the cache's
// (sharding.TensorParallel.CacheKVHeads).
func (m *Model) attention(qkv *Node, tp *sharding.TensorParallel, rope rotary, mask masks, win Window, cache *layerKV) (*Node, *layerKV) {
	cfg := m.Config
	b, w := qkv.Shape().Dimensions[0], qkv.Shape().Dimensions[1]
	heads, kvHeads, d := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	group := heads / kvHeads
	var q, qHeads, k, v *Node
	if tp == nil {
		// One rotation for the query and key heads together.
		qk := rope.apply(Reshape(SliceAxis(qkv, -1, AxisRange(0, (heads+kvHeads)*d)), b, w, heads+kvHeads, d))
		v = Reshape(SliceAxis(qkv, -1, AxisRange((heads+kvHeads)*d, (heads+2*kvHeads)*d)), b, w, kvHeads, d)
		// Query head h uses key/value head h/group, as transformers' repeat_kv: the query
		// heads grouped under their key/value head, [b, w, kvHeads, group, d]. Window
		// keys and values stay [b, w, kvHeads, d]: the dots take their batch axes in place
		// rather than after a transpose.
		qHeads = SliceAxis(qk, 2, AxisRange(0, heads)) // [b, w, heads, d]
		q = Reshape(qHeads, b, w, kvHeads, group, d)
		k = SliceAxis(qk, 2, AxisRange(heads, heads+kvHeads))
	} else {
		qHeads, k, v = groupedQKV(qkv, tp, rope)
		kvHeads = tp.CacheKVHeads()
		group = heads / kvHeads
		q = Reshape(qHeads, b, w, kvHeads, group, d)
	}

	// keys and values, when set, are the cache holding the window's in their slots,
	// attended under visible instead of cache and window apart.
	var keys, values, visible *Node
	var newCache *layerKV
	// uncommit, when set, makes the updated cache from keys and values, once the
	// attention has read them.
	var uncommit func(keys, values *Node) *layerKV
	switch {
	case mask.inSlots != nil && b == 1:
		keys, values, visible = windowInCache(cache.k, k, win.Start), windowInCache(cache.v, v, win.Start), mask.inSlots
		newCache = cache // placed for the attention alone (backend.PlacesWindows)
		if win.WriteLen != nil {
			// The same update again, which XLA computes once, in place: built apart from
			// the keys attended, so that a backend that places windows sees that this one
			// writes (backend/hlo's placementsOf).
			newCache = &layerKV{k: windowInCache(cache.k, k, win.Start), v: windowInCache(cache.v, v, win.Start)}
		}
	case mask.inSlots != nil:
		// Every position added into its slot (zero, by the cache's invariant) for the
		// attention, then the uncommitted ones subtracted again: k + (-k) is exactly 0.
		uncommitted := LogicalNot(committed(win, w))
		keys, values, visible = addToSlots(cache.k, k, win.Start, nil), addToSlots(cache.v, v, win.Start, nil), mask.inSlots
		uncommit = func(keys, values *Node) *layerKV {
			return &layerKV{k: addToSlots(keys, Neg(k), win.Start, uncommitted), v: addToSlots(values, Neg(v), win.Start, uncommitted)}
		}
	case mask.ownSlot != nil:
		keys, values, visible = tokenInCache(cache.k, k, win.Start, nil), tokenInCache(cache.v, v, win.Start, nil), mask.ownSlot
		newCache = cache
		if win.WriteLen != nil {
			// Written by selection, as the keys attended are placed: XLA computes both in
			// one kernel that updates the cache in place.
			newCache = &layerKV{k: tokenInCache(cache.k, k, win.Start, win.WriteLen), v: tokenInCache(cache.v, v, win.Start, win.WriteLen)}
		}
	case cache != nil:
		newCache = &layerKV{k: writeCache(cache.k, k, win), v: writeCache(cache.v, v, win)}
	}

	scale := 1 / math.Sqrt(float64(d))
	if mask.fused != nil { // set for windows that read no cache only
		if out := fusedAttention(qHeads, k, v, compute.AttentionAxesLayoutBSHD, mask.fused, scale); out != nil {
			return Reshape(out, b, w, heads*d), newCache
		}
	}
	// scores of q against keys whose batch axes (b, kvHeads) are keyBatch and whose
	// head dimension is the last: [b, kvHeads, w, group, n] float32.
	scores := func(keys *Node, keyBatch []int) *Node {
		s := Dot(q, keys).WithOutputDType(dtypes.Float32).General([]int{4}, []int{0, 2}, []int{3}, keyBatch)
		return MulScalar(s, scale)
	}
	negInf := Infinity(qkv.Graph(), dtypes.Float32, -1)
	readsCache := cache != nil && mask.cache != nil
	var out *Node
	if keys != nil && mask.overCache != nil {
		// The fused op in BHSD layout: queries [b, heads, w, d] over the cache's slots.
		q := TransposeAllAxes(qHeads, 0, 2, 1, 3)
		windowQKV(qkv, q, k, v, rope)
		if out := fusedAttention(q, keys, values, compute.AttentionAxesLayoutBHSD, mask.overCache, scale); out != nil {
			if uncommit != nil {
				if orders(qkv.Graph()) {
					// The removal writes the cache in place: unless it comes after the
					// fused op's read, XLA copies the cache twice a layer to keep the
					// keys that op reads.
					ordered := OptimizationBarriers(out, keys, values)
					out, keys, values = ordered[0], ordered[1], ordered[2]
				}
				newCache = uncommit(keys, values)
			}
			return Reshape(TransposeAllAxes(out, 0, 2, 1, 3), b, w, heads*d), newCache
		}
	}
	if uncommit != nil {
		newCache = uncommit(keys, values)
	}
	if keys != nil {
		// One score and one value product over the cache [b, kvHeads, s, d] holding the
		// window's keys and values in their slots.
		all := scores(keys, []int{0, 1})
		probs := Softmax(Where(BroadcastToShape(visible, all.Shape()), all, negInf), -1)
		out = weighted(ConvertDType(probs, v.DType()), values, 2, []int{0, 1})
	} else if readsCache && concatenates(cache.k.Shape(), w) {
		// One score and one value product over the cache slots and the window: the
		// window's keys and values join the cache's [b, kvHeads, s+w, d], the cache mask
		// [b, 1, 1, 1, s] the window mask [b, 1, w, 1, w].
		s := cache.k.Shape().Dimensions[2]
		keys := Concatenate([]*Node{cache.k, TransposeAllAxes(k, 0, 2, 1, 3)}, 2)
		values := Concatenate([]*Node{cache.v, TransposeAllAxes(v, 0, 2, 1, 3)}, 2)
		visible := Concatenate([]*Node{BroadcastToDims(mask.cache, b, 1, w, 1, s), mask.window}, -1)
		all := scores(keys, []int{0, 1})
		probs := Softmax(Where(BroadcastToShape(visible, all.Shape()), all, negInf), -1)
		out = weighted(ConvertDType(probs, v.DType()), values, 2, []int{0, 1})
	} else {
		winScores := scores(k, []int{0, 2})
		winScores = Where(BroadcastToShape(mask.window, winScores.Shape()), winScores, negInf)
		if readsCache {
			cacheScores := scores(cache.k, []int{0, 1})
			cacheScores = Where(BroadcastToShape(mask.cache, cacheScores.Shape()), cacheScores, negInf)
			s := cache.k.Shape().Dimensions[2]
			probs := Softmax(Concatenate([]*Node{cacheScores, winScores}, -1), -1)
			probs = ConvertDType(probs, v.DType())
			out = Add(weighted(SliceAxis(probs, -1, AxisRange(0, s)), cache.v, 2, []int{0, 1}),
				weighted(SliceAxis(probs, -1, AxisRange(s, s+w)), v, 1, []int{0, 2}))
		} else {
			out = weighted(ConvertDType(Softmax(winScores, -1), v.DType()), v, 1, []int{0, 2})
		}
	}
	// [b, kvHeads, w, group, d] → [b, w, heads·d]
	return Reshape(TransposeAllAxes(out, 0, 2, 1, 3, 4), b, w, heads*d), newCache
}

// groupedQKV splits the fused projection qkv [b, w, ·] of a tensor-parallel program,
// whose rows lie device after device, each device's query heads, then its key and its
// value heads (sharding.TensorParallel.QKV), into the rotated query heads [b, w, heads,
// d] in their own order, and the rotated keys and the values [b, w, CacheKVHeads, d],
// device after device. Each device's query heads then read its key/value heads as
// repeat_kv does (query head h uses head h/(heads/CacheKVHeads)).
func groupedQKV(qkv *Node, tp *sharding.TensorParallel, rope rotary) (q, k, v *Node) {
	b, w := qkv.Shape().Dimensions[0], qkv.Shape().Dimensions[1]
	n, lh, lkv, d := tp.Devices, tp.LocalHeads, tp.LocalKVHeads, tp.HeadDim
	x := Reshape(qkv, b, w, n, lh+2*lkv, d)
	part := func(from, count int) *Node {
		return Reshape(SliceAxis(x, 3, AxisRange(from, from+count)), b, w, n*count, d)
	}
	return rope.apply(part(0, lh)), rope.apply(part(lh, lkv)), part(lh+lkv, lkv)
}

// orders reports whether g's backend has optimization barriers, which order the
// operations around them.
func orders(g *Graph) bool {
	return g.Backend().Capabilities().Operations[compute.OpTypeOptimizationBarrier]
}

// inSlots reports whether a window of w positions over the cache of b rows that writes
// it (WriteLen set) puts its keys and values into their slots [Start, Start+w) and
// attends over the cache alone, on backends that fuse elementwise work, rather than over
// cache and window apart or concatenated (one-token windows of [inOwnSlot] take their
// select instead). At batch 1 (w > 1) one dynamic update writes them in place; the slots
// past Start+WriteLen then hold uncommitted keys past the committed length, which a window
// reads only after writing them (see [Cache]). A window that writes nothing keeps the
// concatenation, except where the backend's attention reads its keys where they were
// computed (backend.PlacesWindows). At larger batches a scatter adds them into their
// slots, zero by the cache's invariant, and a second subtracts the uncommitted ones after
// the attention: k + (-k) is exactly 0, so the invariant holds.
func inSlots(b, w int) bool { return b > 1 || w > 1 }

// writeSlots returns the cache [1, kvHeads, s, d] with the window's keys (or values) x
// [1, w, kvHeads, d] in slots [start, start+w).
func writeSlots(cache, x, start *Node) *Node {
	zero := ScalarZero(x.Graph(), dtypes.Int32)
	return DynamicUpdateSlice(cache, TransposeAllAxes(x, 0, 2, 1, 3), []*Node{zero, zero, Reshape(start), zero})
}

// inOwnSlot reports whether a window of w positions over the cache [b, kvHeads, s, d]
// attends over a copy of it that holds the window's key and value in their own slot,
// Start (see [placeToken]), rather than over the cache and the window concatenated:
// for one-token windows where the cache is small enough to copy (see [concatenates]).
// That needs no concatenation, no scatter and no pads: one kernel where the concatenated
// path runs five (for windows of 4 and 8, a select per position, it was slower). It takes
// a backend that fuses the select (backend.FusesElementwise), and the window's slot must
// lie in the cache, past CacheLen (see [Window]). Where the backend places windows itself
// (placesWindows: no copy is made) the cache's size does not matter.
func inOwnSlot(cache shapes.Shape, w int, placesWindows bool) bool {
	return w == 1 && (concatenates(cache, w) || placesWindows)
}

// placeToken returns the cache [b, kvHeads, s, d] with a one-token window's key (or
// value) x [b, 1, kvHeads, d] in slot Start [b], where n [b] is positive or nil. It is
// a select over the cache, which XLA fuses into one elementwise kernel, in place where
// the result replaces the cache.
func placeToken(cache, x, start, n *Node) *Node {
	g := x.Graph()
	dims := cache.Shape().Dimensions
	b, kvHeads, s, d := dims[0], dims[1], dims[2], dims[3]
	at := Equal(Iota(g, shapes.Make(dtypes.Int32, 1, s), 1), InsertAxes(start, -1)) // [b, s]
	if n != nil {
		at = LogicalAnd(at, GreaterThan(InsertAxes(n, -1), Const(g, int32(0))))
	}
	at = BroadcastToDims(Reshape(at, b, 1, s, 1), b, kvHeads, s, d)
	return Where(at, BroadcastToDims(TransposeAllAxes(x, 0, 2, 1, 3), b, kvHeads, s, d), cache)
}

// concatMaxBytes bounds the keys and values that a window reading the cache copies to
// attend over cache and window concatenated (see [concatenates]). Concatenating saves a
// score and a value product and the scores' concatenation, about 2 µs per layer on an
// H200, but copies the layer's cache every step: 4 MiB, read and written in about 2 µs
// there, admits batch 1 with a 2048-slot cache of the MiniCPM5-2B shape (2.1 MB); the
// bound is that estimate, not a measurement. On backends that fuse elementwise work,
// windows that write take neither: see [inOwnSlot] and [inSlots].
const concatMaxBytes = 4 << 20

// concatenates reports whether a window of w positions attends over its layer's cache
// [b, kvHeads, s, d] and its own keys and values concatenated: whether the keys and
// values so copied, 2·b·kvHeads·(s+w)·d elements, take at most concatMaxBytes.
func concatenates(cache shapes.Shape, w int) bool {
	dims := cache.Dimensions
	return cache.DType.SizeForDimensions(2, dims[0], dims[1], dims[2]+w, dims[3]) <= concatMaxBytes
}

// fusedAttention runs a window's attention through the backend's fused
// scaled-dot-product attention (the op groups query heads as repeat_kv does), in
// layout: BSHD, q [b, w, heads, d] and k, v [b, w, kvHeads, d], block-causal over the
// window's own keys; or BHSD, q [b, heads, w, d] and k, v [b, kvHeads, s, d], over the
// cache holding the window's keys in their slots. It returns the output in q's layout,
// or nil where the backend declines (ErrNotImplemented).
//
// The mask goes first as a boolean [b, w, n] (the Go backend's float32 kernel takes it
// and skips hidden keys); a backend that declines masks (XLA's cuDNN lowering) gets it
// again as an additive bias [b, heads, w, n] in the compute dtype. BlockSize 1 is plain
// causal attention and uses the op's causal flag, with no mask. With f.laterKeys set,
// the op runs causal too and, if it returns its log-sum-exps, mergeLaterKeys adds each
// query's later keys in its block; otherwise the mask follows as above.
func fusedAttention(q, k, v *Node, layout compute.AttentionAxesLayout, f *fusedMasks, scale float64) *Node {
	heads := q.Shape().Dimensions[2]
	if layout == compute.AttentionAxesLayoutBHSD {
		heads = q.Shape().Dimensions[1]
	}
	try := func(cfg *compute.ScaledDotProductAttentionConfig) (out *Node, states []*Node) {
		err := exceptions.TryCatch[error](func() {
			out, states = BackendFusedScaledDotProductAttention(q, k, v, layout, cfg)
		})
		if err != nil {
			if compute.IsNotImplemented(err) {
				return nil, nil
			}
			panic(err)
		}
		return out, states
	}
	if f.causal || f.laterKeys != nil {
		out, states := try(&compute.ScaledDotProductAttentionConfig{Scale: scale, Causal: true})
		switch {
		case f.causal || out == nil:
			return out
		case len(states) == 1:
			return mergeLaterKeys(out, states[0], q, k, v, f.laterKeys, scale)
		}
	}
	if out, _ := try(&compute.ScaledDotProductAttentionConfig{Scale: scale, Mask: InternalBackendOutputs(f.mask)[0]}); out != nil {
		return out
	}
	out, _ := try(&compute.ScaledDotProductAttentionConfig{Scale: scale, Bias: InternalBackendOutputs(f.additiveBias(heads, q.DType()))[0]})
	return out
}

// mergeLaterKeys turns causal attention into block-causal attention: it merges each
// query's causal output [b, w, heads, d], whose log-sum-exp of scaled scores is lse
// [b, heads, w] (float32), with its keys later in its own block, at most BlockSize-1 of
// them: laterKeys[t-1] [b, w] says whether the key t positions after a query is in its
// block. q is [b, w, heads, d], k and v [b, w, kvHeads, d]. cuDNN's causal attention
// skips the tiles past the diagonal; with the block-causal mask, a bias there, it
// computes every tile.
func mergeLaterKeys(causal, lse, q, k, v *Node, laterKeys []*Node, scale float64) *Node {
	dims := q.Shape().Dimensions
	b, w, heads, d := dims[0], dims[1], dims[2], dims[3]
	kvHeads := k.Shape().Dimensions[2]
	group := heads / kvHeads
	g := q.Graph()
	f32 := func(x *Node) *Node { return ConvertDType(x, dtypes.Float32) }
	grouped := Reshape(f32(q), b, w, kvHeads, group, d)
	lse = Reshape(TransposeAllAxes(f32(lse), 0, 2, 1), b, w, kvHeads, group)
	shifted := func(x *Node, t int) *Node { // x [b, w, kvHeads, d] moved t positions up
		x = Pad(f32(x), ScalarZero(g, dtypes.Float32), compute.PadAxis{}, compute.PadAxis{End: t})
		return InsertAxes(SliceAxis(x, 1, AxisRange(t, t+w)), 3)
	}
	scores := make([]*Node, len(laterKeys)) // [b, w, kvHeads, group]
	top := lse
	for i := range laterKeys {
		scores[i] = MulScalar(ReduceSum(Mul(grouped, shifted(k, i+1)), -1), scale)
		top = Max(top, scores[i])
	}
	// Sums of exp(score - top) over the keys, and of the values so weighted: the causal
	// part's are exp(lse - top) and its output times that.
	weight := Exp(Sub(lse, top))
	total := weight
	sum := Mul(Reshape(f32(causal), b, w, kvHeads, group, d), InsertAxes(weight, -1))
	for i, visible := range laterKeys {
		visible = BroadcastToDims(Reshape(visible, b, w, 1, 1), b, w, kvHeads, group)
		e := Where(visible, Exp(Sub(scores[i], top)), ZerosLike(top))
		total = Add(total, e)
		sum = Add(sum, Mul(shifted(v, i+1), InsertAxes(e, -1)))
	}
	return ConvertDType(Reshape(Div(sum, InsertAxes(total, -1)), b, w, heads, d), q.DType())
}

// weighted sums values with probs [b, kvHeads, w, group, n]: values' position axis is
// pos and its (b, kvHeads) axes are batch. The result is [b, kvHeads, w, group, d].
func weighted(probs, values *Node, pos int, batch []int) *Node {
	return Dot(probs, values).General([]int{4}, []int{0, 1}, []int{pos}, batch)
}

// writeCache adds the first WriteLen keys (or values) x [b, w, kvHeads, d] of each row
// into its cache [b, kvHeads, s, d] at slots Start+i. Slots past a row's committed
// length are zero (see [Cache]), so adding writes; positions not written add zero.
func writeCache(cache, x *Node, win Window) *Node {
	if win.WriteLen == nil {
		return cache
	}
	return addToSlots(cache, x, win.Start, committed(win, x.Shape().Dimensions[1]))
}

// committed is [b, w]: which of a window's w positions it writes, those below WriteLen.
func committed(win Window, w int) *Node {
	i := Iota(win.WriteLen.Graph(), shapes.Make(dtypes.Int32, 1, w), 1)
	return LessThan(i, InsertAxes(win.WriteLen, -1))
}

// addToSlots adds the keys (or values) x [b, w, kvHeads, d] of each row where add [b, w]
// is true (every position where add is nil) into its cache [b, kvHeads, s, d] at slots
// Start+i, by one scatter. Positions past the cache add nothing (their slot is clamped
// and their value zeroed).
func addToSlots(cache, x, start, add *Node) *Node {
	g := x.Graph()
	dims := x.Shape().Dimensions
	b, w, kvHeads := dims[0], dims[1], dims[2]
	s := cache.Shape().Dimensions[2]
	slot := Add(InsertAxes(start, -1), Iota(g, shapes.Make(dtypes.Int32, 1, w), 1)) // [b, w]
	inCache := LessThan(slot, Const(g, int32(s)))
	if add == nil {
		add = inCache
	} else {
		add = LogicalAnd(add, inCache)
	}
	x = Where(BroadcastToShape(Reshape(add, b, w, 1, 1), x.Shape()), x, ZerosLike(x))
	slot = MinScalar(slot, float64(s-1))
	shape := shapes.Make(dtypes.Int32, b, w, kvHeads)
	indices := Stack([]*Node{
		Iota(g, shape, 0),
		Iota(g, shape, 2),
		BroadcastToDims(Reshape(slot, b, w, 1), b, w, kvHeads),
	}, -1)
	return ScatterSum(cache, indices, x, false, false)
}
