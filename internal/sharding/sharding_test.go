package sharding

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDataParallel(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		p, err := NewDataParallel(n, 32)
		require.NoError(t, err, "devices %d", n)
		assert.Equal(t, 32/n, p.PerDevice)
		assert.Equal(t, n > 1, p.Distributed())
		next := 0
		for d := range n {
			start, end := p.RowRange(d)
			assert.Equal(t, next, start)
			next = end
		}
		assert.Equal(t, 32, next, "the devices' rows tile the batch")
		assert.Equal(t, 0, p.Axis(BatchRows))
		for _, k := range []InputKind{Weights, OptimizerState, StepState} {
			assert.Equal(t, Replicated, p.Axis(k), "%s", k)
		}
	}
	_, err := NewDataParallel(8, 12)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a batch of 12 rows does not divide over 8 devices (use a multiple of 8, e.g. 16)")
	for _, bad := range [][2]int{{0, 8}, {-1, 8}, {2, 0}, {MaxDevices + 1, MaxDevices + 1}, {3, 32}} {
		_, err := NewDataParallel(bad[0], bad[1])
		assert.Error(t, err, "devices %d batch %d", bad[0], bad[1])
	}
}

func TestSpec(t *testing.T) {
	rows := shapes.Make(dtypes.Int32, 32, 513)
	for _, n := range []int{1, 2, 4, 8} {
		mesh, err := Mesh(n, BatchAxis)
		require.NoError(t, err)
		spec, err := Spec(mesh, 2, 0)
		require.NoError(t, err)
		assert.Equal(t, []int{32 / n, 513}, spec.ShardShape(rows).Dimensions)
		assert.Equal(t, rows.Dimensions, spec.LogicalShapeForShard(spec.ShardShape(rows)).Dimensions)
		rep, err := Spec(mesh, 2, Replicated)
		require.NoError(t, err)
		assert.True(t, rep.IsReplicated())
		assert.Equal(t, rows.Dimensions, rep.ShardShape(rows).Dimensions)
	}
	mesh, err := Mesh(2, BatchAxis)
	require.NoError(t, err)
	_, err = Spec(mesh, 2, 2)
	assert.Error(t, err, "axis beyond the rank")
	_, err = Spec(nil, 2, 0)
	assert.Error(t, err)
	_, err = Mesh(0, BatchAxis)
	assert.Error(t, err)
}

var miniCPM5 = Shape{Hidden: 2048, Heads: 16, KVHeads: 2, HeadDim: 128, FFN: 6144}

func TestTensorParallelMiniCPM5(t *testing.T) {
	for _, c := range []struct{ n, heads, kv, replicas, ffn int }{
		{1, 16, 2, 1, 6144}, {2, 8, 1, 1, 3072}, {4, 4, 1, 2, 1536}, {8, 2, 1, 4, 768},
	} {
		p, err := NewTensorParallel(miniCPM5, c.n)
		require.NoError(t, err, "devices %d", c.n)
		assert.Equal(t, []int{c.heads, c.kv, c.replicas, c.ffn}, []int{p.LocalHeads, p.LocalKVHeads, p.KVReplicas, p.LocalFFN},
			"devices %d", c.n)
		assert.Equal(t, c.n*c.kv, p.CacheKVHeads(), "devices %d: the cache's heads, replicas counted", c.n)
		assert.Equal(t, miniCPM5.KVHeads*p.KVReplicas, p.CacheKVHeads(), "devices %d", c.n)
		checkPlacements(t, p)
	}
	for _, n := range []int{3, 5, 6, 32, 0} {
		_, err := NewTensorParallel(miniCPM5, n)
		assert.Error(t, err, "devices %d", n)
	}
	_, err := NewTensorParallel(miniCPM5, 32)
	assert.ErrorContains(t, err, "16 query heads")
}

func TestTensorParallelRefusals(t *testing.T) {
	_, err := NewTensorParallel(Shape{Hidden: 64, Heads: 12, KVHeads: 3, HeadDim: 8, FFN: 128}, 2)
	assert.ErrorContains(t, err, "3 key/value heads does not divide over the devices (2), nor is 2 a multiple")
	_, err = NewTensorParallel(Shape{Hidden: 64, Heads: 8, KVHeads: 2, HeadDim: 8, FFN: 100}, 8)
	assert.ErrorContains(t, err, "an FFN of 100 columns")
	_, err = NewTensorParallel(Shape{Hidden: 64, Heads: 8, KVHeads: 3, HeadDim: 8, FFN: 64}, 1)
	assert.ErrorContains(t, err, "not a multiple of 3 key/value heads")
	_, err = NewTensorParallel(Shape{Heads: 8, KVHeads: 2, HeadDim: 8, FFN: 64}, 1)
	assert.Error(t, err, "no hidden size")
}

// checkPlacements checks the structure of every placement: equal shards, each index
// held by one device (key/value heads by KVReplicas), and each device's query heads
// reading key/value heads it holds.
func checkPlacements(t *testing.T, p *TensorParallel) {
	t.Helper()
	hd := p.HeadDim
	qkvRows := (p.Heads + 2*p.KVHeads) * hd
	held := func(pl Placement, size int) []int {
		count := make([]int, size)
		for d, parts := range pl.Parts {
			n := 0
			for _, r := range parts {
				n += r.Len()
				for i := r.Start; i < r.End; i++ {
					count[i]++
				}
			}
			assert.Equal(t, pl.ShardLen(), n, "device %d's shard", d)
		}
		return count
	}
	qkv := held(p.QKV(), qkvRows)
	for i, c := range qkv {
		want := 1
		if i >= p.Heads*hd {
			want = p.KVReplicas
		}
		require.Equal(t, want, c, "qkv row %d held by %d devices, want %d", i, c, want)
	}
	assert.Equal(t, (p.LocalHeads+2*p.LocalKVHeads)*hd, p.QKV().ShardLen())
	for _, pl := range []struct {
		name string
		pl   Placement
		size int
		axis int
	}{{"o", p.O(), p.Heads * hd, 1}, {"down", p.Down(), p.FFN, 1}, {"gate_up", p.GateUp(), 2 * p.FFN, 0}, {"q", p.Q(), p.Heads * hd, 0}} {
		assert.Equal(t, pl.axis, pl.pl.Axis, pl.name)
		for i, c := range held(pl.pl, pl.size) {
			require.Equal(t, 1, c, "%s index %d", pl.name, i)
		}
	}
	assert.True(t, p.O().Contiguous())
	assert.True(t, p.Down().Contiguous())
	assert.False(t, p.GateUp().Contiguous(), "gate and up: two ranges per device")
	group := p.Heads / p.KVHeads
	for d := range p.Devices {
		kv := p.kvHeads(d)
		q := p.queryHeads(d)
		for h := q.Start; h < q.End; h++ {
			assert.True(t, h/group >= kv.Start && h/group < kv.End, "device %d: query head %d reads key/value head %d, holds %v",
				d, h, h/group, kv)
		}
	}
	for _, name := range []string{"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
		"model.layers.0.input_layernorm.weight", "model.layers.41.post_attention_layernorm.weight"} {
		pl, err := p.ForWeight(name)
		require.NoError(t, err, name)
		assert.Equal(t, Replicated, pl.Axis, name)
		assert.Nil(t, pl.Order(), name)
	}
	for name, want := range map[string]Placement{
		"model.layers.3.self_attn.qkv_proj.weight": p.QKV(), "model.layers.3.self_attn.o_proj.weight": p.O(),
		"model.layers.3.mlp.gate_up_proj.weight": p.GateUp(), "model.layers.3.mlp.down_proj.weight": p.Down(),
		"model.layers.3.self_attn.q_proj.weight": p.Q(), "model.layers.3.self_attn.k_proj.weight": p.K(),
		"model.layers.3.self_attn.v_proj.weight": p.V(), "model.layers.3.mlp.gate_proj.weight": p.Gate(),
		"model.layers.3.mlp.up_proj.weight": p.Gate(),
	} {
		got, err := p.ForWeight(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"model.layers.3.self_attn.rotary.weight", "model.layers.3.mlp.down_proj.bias",
		"model.layers.3", "model.other.weight", "weight"} {
		_, err := p.ForWeight(name)
		assert.Error(t, err, name)
	}
}

// TestTensorParallelComputes runs a layer of a small model whole and as the devices
// would by the plan (each on its shard of the re-laid weights, the partial sums of o
// and down added as the all-reduces add them) and compares them.
func TestTensorParallelComputes(t *testing.T) {
	s := Shape{Hidden: 6, Heads: 8, KVHeads: 2, HeadDim: 3, FFN: 16}
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = rng.NormFloat64()
		}
		return out
	}
	const keys = 5
	x := randn(s.Hidden)          // the query's input
	ctx := randn(keys * s.Hidden) // the keys' inputs (the query's among them)
	qkv := randn((s.Heads + 2*s.KVHeads) * s.HeadDim * s.Hidden)
	o := randn(s.Hidden * s.Heads * s.HeadDim)
	gateUp := randn(2 * s.FFN * s.Hidden)
	down := randn(s.Hidden * s.FFN)

	whole := layer(s, x, ctx, qkv, o, gateUp, down)
	for _, n := range []int{1, 2, 4, 8} {
		p, err := NewTensorParallel(s, n)
		require.NoError(t, err)
		local := Shape{Hidden: s.Hidden, Heads: p.LocalHeads, KVHeads: p.LocalKVHeads, HeadDim: s.HeadDim, FFN: p.LocalFFN}
		sum := make([]float64, s.Hidden)
		for d := range n {
			part := layer(local, x, ctx, shard(p.QKV(), d, qkv, s.Hidden), shard(p.O(), d, o, s.Heads*s.HeadDim),
				shard(p.GateUp(), d, gateUp, s.Hidden), shard(p.Down(), d, down, s.FFN))
			for i := range sum {
				sum[i] += part[i]
			}
		}
		for i := range sum {
			assert.InDelta(t, whole[i], sum[i], 1e-9*(1+math.Abs(whole[i])), "devices %d output %d", n, i)
		}
	}
}

// shard returns device d's part of a row-major weight of cols columns by placement pl.
func shard(pl Placement, d int, w []float64, cols int) []float64 {
	rows := len(w) / cols
	var out []float64
	if pl.Axis == 0 {
		for _, r := range pl.Parts[d] {
			out = append(out, w[r.Start*cols:r.End*cols]...)
		}
		return out
	}
	for i := range rows {
		for _, r := range pl.Parts[d] {
			out = append(out, w[i*cols+r.Start:i*cols+r.End]...)
		}
	}
	return out
}

// layer returns the attention of one query over keys (no softmax scale, no rotary: they
// act per head and do not change the split) followed by its o projection, plus the
// SwiGLU MLP of x: the two sums a tensor-parallel layer all-reduces.
func layer(s Shape, x, ctx, qkv, o, gateUp, down []float64) []float64 {
	hd := s.HeadDim
	matvec := func(w, v []float64, rows int) []float64 {
		out := make([]float64, rows)
		cols := len(v)
		for r := range rows {
			for c := range cols {
				out[r] += w[r*cols+c] * v[c]
			}
		}
		return out
	}
	width := (s.Heads + 2*s.KVHeads) * hd
	q := matvec(qkv, x, width)[:s.Heads*hd]
	keys := len(ctx) / s.Hidden
	kv := make([][]float64, keys)
	for j := range kv {
		kv[j] = matvec(qkv, ctx[j*s.Hidden:(j+1)*s.Hidden], width)
	}
	attn := make([]float64, s.Heads*hd)
	group := s.Heads / s.KVHeads
	for h := range s.Heads {
		g := h / group
		scores := make([]float64, keys)
		var total float64
		for j := range keys {
			k := kv[j][s.Heads*hd+g*hd : s.Heads*hd+(g+1)*hd]
			for i := range hd {
				scores[j] += q[h*hd+i] * k[i]
			}
			scores[j] = math.Exp(scores[j])
			total += scores[j]
		}
		for j := range keys {
			v := kv[j][(s.Heads+s.KVHeads)*hd+g*hd : (s.Heads+s.KVHeads)*hd+(g+1)*hd]
			for i := range hd {
				attn[h*hd+i] += scores[j] / total * v[i]
			}
		}
	}
	out := matvec(o, attn, s.Hidden)
	gu := matvec(gateUp, x, 2*s.FFN)
	act := make([]float64, s.FFN)
	for i := range act {
		g := gu[i]
		act[i] = g / (1 + math.Exp(-g)) * gu[s.FFN+i]
	}
	for i, v := range matvec(down, act, s.Hidden) {
		out[i] += v
	}
	return out
}

func TestPlacementOrder(t *testing.T) {
	p, err := NewTensorParallel(Shape{Hidden: 4, Heads: 4, KVHeads: 2, HeadDim: 1, FFN: 4}, 4)
	require.NoError(t, err)
	// q heads one per device; k and v heads 0,0,1,1 (each replicated on two devices).
	assert.Equal(t, []int{0, 4, 6, 1, 4, 6, 2, 5, 7, 3, 5, 7}, p.QKV().Order())
	assert.Equal(t, []int{0, 4, 1, 5, 2, 6, 3, 7}, p.GateUp().Order())
	assert.Equal(t, []int{0, 1, 2, 3}, p.Down().Order())
	assert.False(t, p.QKV().Contiguous())
	one, err := NewTensorParallel(Shape{Hidden: 4, Heads: 4, KVHeads: 2, HeadDim: 1, FFN: 4}, 1)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, one.QKV().Order(), "one device: the weight as it is")
}
