package model

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// rotary holds cos and sin [b, w, 1, headDim/2] for a window's positions, in float32.
type rotary struct{ cos, sin *Node }

// newRotary computes the rotation angles pos·invFreq in float32, as transformers does,
// at any position.
func newRotary(invFreq, pos *Node, attentionFactor float64) rotary {
	half := invFreq.Shape().Dimensions[0]
	angles := Mul(InsertAxes(ConvertDType(pos, dtypes.Float32), -1), Reshape(invFreq, 1, 1, half)) // [b, w, d/2]
	cos, sin := Cos(angles), Sin(angles)
	if attentionFactor != 1 {
		cos, sin = MulScalar(cos, attentionFactor), MulScalar(sin, attentionFactor)
	}
	return rotary{cos: InsertAxes(cos, 2), sin: InsertAxes(sin, 2)}
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
}

// attentionMask builds the block-causal mask within the window and the length mask of
// the cache. Cache slots are earlier blocks, so all valid ones are visible.
func attentionMask(win Window, pos *Node, cache *CacheNodes) masks {
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
		m.cache = Reshape(m.cache, m.cache.Shape().Dimensions[0], 1, 1, 1, s)
	}
	return m
}

// layerKV is one layer's cache.
type layerKV struct{ k, v *Node }

// attention runs grouped-query attention for the fused q/k/v projection qkv [b, w, ·]
// and returns its output [b, w, heads·d] and the layer's updated cache.
func (m *Model) attention(qkv *Node, rope rotary, mask masks, win Window, cache *layerKV) (*Node, *layerKV) {
	cfg := m.Config
	b, w := qkv.Shape().Dimensions[0], qkv.Shape().Dimensions[1]
	heads, kvHeads, d := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	group := heads / kvHeads
	q := Reshape(SliceAxis(qkv, -1, AxisRange(0, heads*d)), b, w, heads, d)
	k := Reshape(SliceAxis(qkv, -1, AxisRange(heads*d, (heads+kvHeads)*d)), b, w, kvHeads, d)
	v := Reshape(SliceAxis(qkv, -1, AxisRange((heads+kvHeads)*d, (heads+2*kvHeads)*d)), b, w, kvHeads, d)
	q, k = rope.apply(q), rope.apply(k)

	// Query head h uses key/value head h/group, as transformers' repeat_kv: group the
	// query heads under their key/value head, [b, kvHeads, w, group, d].
	q = TransposeAllAxes(Reshape(q, b, w, kvHeads, group, d), 0, 2, 1, 3, 4)
	k = TransposeAllAxes(k, 0, 2, 1, 3) // [b, kvHeads, w, d]
	v = TransposeAllAxes(v, 0, 2, 1, 3)

	scale := 1 / math.Sqrt(float64(d))
	scores := func(keys *Node) *Node { // [b, kvHeads, w, group, n] float32
		s := Dot(q, keys).WithOutputDType(dtypes.Float32).General([]int{4}, []int{0, 1}, []int{3}, []int{0, 1})
		return MulScalar(s, scale)
	}
	negInf := Infinity(qkv.Graph(), dtypes.Float32, -1)
	winScores := scores(k)
	winScores = Where(BroadcastToShape(mask.window, winScores.Shape()), winScores, negInf)

	var newCache *layerKV
	var out *Node
	if cache != nil && mask.cache != nil {
		cacheScores := scores(cache.k)
		cacheScores = Where(BroadcastToShape(mask.cache, cacheScores.Shape()), cacheScores, negInf)
		s := cache.k.Shape().Dimensions[2]
		probs := Softmax(Concatenate([]*Node{cacheScores, winScores}, -1), -1)
		probs = ConvertDType(probs, v.DType())
		out = Add(weighted(SliceAxis(probs, -1, AxisRange(0, s)), cache.v),
			weighted(SliceAxis(probs, -1, AxisRange(s, s+w)), v))
	} else {
		out = weighted(ConvertDType(Softmax(winScores, -1), v.DType()), v)
	}
	if cache != nil {
		newCache = &layerKV{k: writeCache(cache.k, k, win), v: writeCache(cache.v, v, win)}
	}
	// [b, kvHeads, w, group, d] → [b, w, heads·d]
	out = Reshape(TransposeAllAxes(out, 0, 2, 1, 3, 4), b, w, heads*d)
	return out, newCache
}

// weighted sums values [b, kvHeads, n, d] with probs [b, kvHeads, w, group, n].
func weighted(probs, values *Node) *Node {
	return Dot(probs, values).General([]int{4}, []int{0, 1}, []int{2}, []int{0, 1})
}

// writeCache adds the first WriteLen keys (or values) x [b, kvHeads, w, d] of each row
// into its cache [b, kvHeads, s, d] at slots Start+i. Slots past a row's committed
// length are zero (see [Cache]), so adding writes; positions not written add zero.
func writeCache(cache, x *Node, win Window) *Node {
	if win.WriteLen == nil {
		return cache
	}
	g := x.Graph()
	dims := x.Shape().Dimensions
	b, kvHeads, w := dims[0], dims[1], dims[2]
	s := cache.Shape().Dimensions[2]
	i := Iota(g, shapes.Make(dtypes.Int32, 1, w), 1)
	write := LessThan(i, InsertAxes(win.WriteLen, -1)) // [b, w]
	x = Where(BroadcastToShape(Reshape(write, b, 1, w, 1), x.Shape()), x, ZerosLike(x))
	slot := MinScalar(Add(InsertAxes(win.Start, -1), i), float64(s-1)) // [b, w]; clamped slots get zeros
	shape := shapes.Make(dtypes.Int32, b, kvHeads, w)
	indices := Stack([]*Node{
		Iota(g, shape, 0),
		Iota(g, shape, 1),
		BroadcastToDims(Reshape(slot, b, 1, w), b, kvHeads, w),
	}, -1)
	return ScatterSum(cache, indices, x, false, false)
}
