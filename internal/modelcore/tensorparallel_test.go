package modelcore

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/sharding"
	"github.com/blockdiff/blockdiff/internal/testutil"
)

// tpConfig is a small model whose heads split over 1 to 8 devices: 8 query heads, 2
// key/value heads (replicated over 4 and 8 devices), an FFN of 64 columns.
func tpConfig() Config {
	cfg := tinyConfig()
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.IntermediateSize = 8, 2, 4, 64
	return cfg
}

// decodeTrace is what a model gives on a fixed decode: the logits of greedy
// autoregressive steps (blocks of one) after a prefill, and of denoise steps and a
// commit of 4-token blocks.
type decodeTrace struct {
	ar      [][]float32 // the prefill's last row, then one row per step
	tokens  []int       // the greedy token of each row of ar
	denoise [][][]float32
}

// traceDecode decodes with sessions from open: arSteps greedy steps, taking forced's
// tokens instead where it is set (so that two models are compared on the same inputs),
// then a denoise step, a commit and another denoise step of 4-token blocks.
func traceDecode(t *testing.T, cfg Config, open func(capacity, block int) (*Session, error), arSteps int, forced []int) decodeTrace {
	t.Helper()
	prompt := make([]int, 8)
	for i := range prompt {
		prompt[i] = (7*i + 3) % cfg.VocabSize
	}
	var tr decodeTrace
	s, err := open(32, 1)
	require.NoError(t, err)
	last, err := s.Prefill(prompt)
	require.NoError(t, err)
	tr.ar = append(tr.ar, last)
	for i := range arSteps {
		tok := argmax(last)
		tr.tokens = append(tr.tokens, tok)
		if forced != nil {
			tok = forced[i]
		}
		rows, err := s.Commit([]int{tok})
		require.NoError(t, err)
		last = rows[0]
		tr.ar = append(tr.ar, last)
	}
	tr.tokens = append(tr.tokens, argmax(last))
	s.Close()

	s, err = open(32, 4)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(prompt)
	require.NoError(t, err)
	mask := cfg.MaskTokenID
	for _, step := range []struct {
		tokens []int
		commit bool
	}{{[]int{5, mask, mask, mask}, false}, {[]int{5, 9, 11, 13}, true}, {[]int{17, mask, 19, mask}, false}} {
		var rows [][]float32
		if step.commit {
			rows, err = s.Commit(step.tokens)
		} else {
			rows, err = s.Step(step.tokens)
		}
		require.NoError(t, err)
		tr.denoise = append(tr.denoise, rows)
	}
	return tr
}

// argmax returns the index of the largest value.
func argmax(row []float32) int {
	best := 0
	for i, x := range row {
		if x > row[best] {
			best = i
		}
	}
	return best
}

// compareTraces checks got against want: every logit within tol of the largest in
// magnitude (as maxRelDiff), and every row's greedy token (the autoregressive steps'
// tokens among them) the same wherever want's top two are further apart than the
// differences tol allows (a closer pair may flip within tolerance: logged). It returns
// the largest relative difference.
func compareTraces(t *testing.T, got, want decodeTrace, tol float64) float64 {
	t.Helper()
	worst := maxRelDiff(t, got.ar, want.ar)
	for i := range want.denoise {
		worst = math.Max(worst, maxRelDiff(t, got.denoise[i], want.denoise[i]))
	}
	assert.LessOrEqual(t, worst, tol, "logits")
	rows := append([][]float32{}, want.ar...)
	gotRows := append([][]float32{}, got.ar...)
	for i := range want.denoise {
		rows, gotRows = append(rows, want.denoise[i]...), append(gotRows, got.denoise[i]...)
	}
	scale := 0.0
	for _, r := range rows {
		for _, x := range r {
			scale = math.Max(scale, math.Abs(float64(x)))
		}
	}
	for i, r := range rows {
		a, b := argmax(r), argmax(gotRows[i])
		if a == b {
			continue
		}
		top, second := float64(r[a]), math.Inf(-1)
		for j, x := range r {
			if j != a {
				second = math.Max(second, float64(x))
			}
		}
		if gap := top - second; gap > 2*tol*scale {
			t.Errorf("row %d: greedy token %d, want %d (top-2 gap %.3g, tolerance %.3g)", i, b, a, gap, 2*tol*scale)
		} else {
			t.Logf("row %d: greedy token %d, want %d: a near-tie (top-2 gap %.3g)", i, b, a, gap)
		}
	}
	return worst
}

// tpModels are the models the tensor-parallel tests decode: the fixture models (when
// present) in float32, and a random tpConfig model.
func tpModels(t *testing.T, b compute.Backend) map[string]*Model {
	t.Helper()
	models := map[string]*Model{}
	if _, ok := fixtures.Root(); ok {
		for _, dir := range fixtures.Subdirs(t, "models") {
			m, err := Load(b, dir, LoadOptions{DType: dtypes.Float32})
			require.NoError(t, err, dir)
			t.Cleanup(func() { _ = m.Close() })
			models[filepath.Base(dir)] = m
		}
	} else {
		t.Log("fixture models absent: the random model only")
	}
	m, err := NewRandom(b, tpConfig(), dtypes.Float32, 3)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	models["random"] = m
	return models
}

// The weights laid out for N devices, run whole on one (as XLA's partitioner sees the
// program before it splits it), decode as the model does: the fused q/k/v and gate/up
// rows regrouped device after device, the key/value heads repeated where the plan
// replicates them. At N = 1 the layout is the model's own and the logits are equal.
// Both the Go backend's attention paths and those of backends that fuse elementwise
// work (XLA's, which partitions) are taken.
func TestTensorParallelLayoutDecodesAsTheModel(t *testing.T) {
	b := testutil.Backend(t)
	for name, m := range tpModels(t, b) {
		for _, fuses := range []bool{false, true} {
			m.paths.fuses = fuses
			m.programs.finalize()
			testLayoutDecodes(t, fmt.Sprintf("%s/fuses=%v", name, fuses), m)
		}
	}
}

// testLayoutDecodes is TestTensorParallelLayoutDecodesAsTheModel on one model.
func testLayoutDecodes(t *testing.T, name string, m *Model) {
	want := traceDecode(t, m.Config, m.NewSession, 3, nil)
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
			tp, err := m.TensorParallelLayout(n)
			if err != nil {
				t.Logf("not split: %v", err)
				require.ErrorContains(t, err, "does not divide")
				return
			}
			defer tp.Close()
			got := traceDecode(t, m.Config, tp.NewSession, 3, want.tokens)
			if n == 1 {
				require.Equal(t, want, got)
				return
			}
			t.Logf("max |Δ| / max |ref| = %.2g (cache heads %d)", compareTraces(t, got, want, 1e-5), tp.Plan.CacheKVHeads())
		})
	}
}

// Every weight gets the spec of its plan: q/k/v and gate/up split by rows (output
// features), o and down by columns (input features), the rest whole; the cache splits
// by key/value heads.
func TestTensorParallelSpecs(t *testing.T) {
	m := randomModel(t, tpConfig(), 1)
	cfg := m.Config
	for _, n := range []int{1, 2, 4, 8} {
		plan, err := sharding.NewTensorParallel(sharding.Shape{Hidden: cfg.HiddenSize, Heads: cfg.NumHeads,
			KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, FFN: cfg.IntermediateSize}, n)
		require.NoError(t, err)
		mesh, err := sharding.Mesh(n, sharding.TensorAxis)
		require.NoError(t, err)
		tp := &TensorParallel{Plan: plan, m: m, order: m.params(), mesh: mesh}
		require.NoError(t, tp.plan())
		h, hd, ffn := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
		local := (plan.LocalHeads + 2*plan.LocalKVHeads) * hd
		split := map[*tensors.Tensor][2][]int{} // logical, shard dims
		for _, l := range m.Layers {
			split[l.QKV.Params()[0]] = [2][]int{{n * local, h}, {local, h}}
			split[l.O.Params()[0]] = [2][]int{{h, cfg.NumHeads * hd}, {h, plan.LocalHeads * hd}}
			split[l.GateUp.Params()[0]] = [2][]int{{2 * ffn, h}, {2 * ffn / n, h}}
			split[l.Down.Params()[0]] = [2][]int{{h, ffn}, {h, ffn / n}}
		}
		for i, w := range m.params() {
			spec, logical, err := tp.weightSpec(w)
			require.NoError(t, err)
			dims, ok := split[w]
			if !ok {
				assert.True(t, spec.IsReplicated(), "devices %d: weight %d %s replicated", n, i, w.Shape())
				assert.Equal(t, w.Shape(), logical)
				continue
			}
			assert.Equal(t, dims[0], logical.Dimensions, "devices %d: weight %d's laid-out shape", n, i)
			assert.Equal(t, dims[1], spec.ShardShape(logical).Dimensions, "devices %d: weight %d's shard", n, i)
			assert.False(t, spec.IsReplicated(), "devices %d: weight %d", n, i)
		}
		cache := tp.CacheShape(1, 16)
		assert.Equal(t, []int{1, n * plan.LocalKVHeads, 16, hd}, cache.Dimensions)
		spec, err := sharding.Spec(mesh, 4, 1)
		require.NoError(t, err)
		assert.Equal(t, []int{1, plan.LocalKVHeads, 16, hd}, spec.ShardShape(cache).Dimensions)
	}
	_, _, err := (&TensorParallel{}).weightSpec(m.Embed)
	assert.ErrorContains(t, err, "is not a parameter of the model")
}

// Each device's share of a weight holds the rows or columns its plan gives it.
func TestTensorParallelShards(t *testing.T) {
	s := shapes.Make(dtypes.Int32, 4, 3)
	data := make([]byte, 0, s.ByteSize())
	for i := range int32(12) {
		data = append(data, byte(i), 0, 0, 0) // little-endian int32 i
	}
	values := func(shape shapes.Shape, b []byte) []int {
		out := make([]int, shape.Size())
		for i := range out {
			out[i] = int(b[4*i])
		}
		return out
	}
	rows, part := gatherAxis(s, data, 0, []int{3, 1})
	assert.Equal(t, []int{2, 3}, rows.Dimensions)
	assert.Equal(t, []int{9, 10, 11, 3, 4, 5}, values(rows, part))
	cols, part := gatherAxis(s, data, 1, []int{2, 0})
	assert.Equal(t, []int{4, 2}, cols.Dimensions)
	assert.Equal(t, []int{2, 0, 5, 3, 8, 6, 11, 9}, values(cols, part))
}

// What cannot split is refused, each with the reason: head counts or an FFN that do not
// divide over the devices, more devices than the backend addresses, a backend that
// cannot partition (the Go backend), layers that are not dense, a closed model.
func TestTensorParallelRefusals(t *testing.T) {
	m := randomModel(t, tpConfig(), 1)
	_, err := m.TensorParallel(3)
	assert.ErrorContains(t, err, "model: tensor parallelism over 3 devices: sharding: 8 query heads: does not divide over the devices (3)")
	_, err = m.TensorParallel(16)
	assert.ErrorContains(t, err, "model: tensor parallelism over 16 devices: sharding: 8 query heads: does not divide over the devices (16)")
	_, err = m.TensorParallel(0)
	assert.ErrorContains(t, err, "model: tensor parallelism over 0 devices: sharding: 0 devices: need at least one")

	cfg := tpConfig()
	cfg.NumKVHeads, cfg.NumHeads = 3, 12
	odd := randomModel(t, cfg, 1)
	_, err = odd.tensorParallel(2, false)
	assert.ErrorContains(t, err, "sharding: 3 key/value heads does not divide over the devices (2), nor is 2 a multiple of them")

	if b := m.Backend(); b.String() == "go" {
		_, err = m.TensorParallel(2)
		assert.EqualError(t, err, "model: tensor parallelism over 2 devices: the backend "+b.Name()+" addresses 1 devices "+
			"(go-xla's backend addresses all of its plugin's: backend.ForDevices)")
		_, err = m.TensorParallel(1)
		require.ErrorIs(t, err, compute.ErrNotImplemented)
		assert.ErrorContains(t, err, "model: tensor parallelism over 1 devices: the backend "+b.Name()+
			" cannot partition programs over a mesh of devices (go-xla's backend can: backend.ForDevices): ")
	}

	other := randomModel(t, tpConfig(), 2)
	other.Linears()[1].Set(&notDense{other.Layers[0].O})
	_, err = other.tensorParallel(2, false)
	assert.ErrorContains(t, err, "model.layers.0.self_attn.o_proj is a *modelcore.notDense: only dense layers split")

	tp, err := m.tensorParallel(2, false)
	require.NoError(t, err)
	require.NoError(t, tp.Close())
	require.NoError(t, tp.Close(), "closing twice")
	_, err = tp.NewSession(16, 1)
	assert.ErrorIs(t, err, ErrClosed)

	closed, err := NewRandom(testutil.Backend(t), tpConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = closed.tensorParallel(2, false)
	assert.ErrorIs(t, err, ErrClosed)
}

// A model keeps its layouts: the same one until it is closed, or the model's linear
// layers change, or the model closes.
func TestTensorParallelLayoutsAreKept(t *testing.T) {
	m, err := NewRandom(testutil.Backend(t), tpConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	a, err := m.TensorParallelLayout(2)
	require.NoError(t, err)
	again, err := m.TensorParallelLayout(2)
	require.NoError(t, err)
	assert.Same(t, a, again)
	four, err := m.TensorParallelLayout(4)
	require.NoError(t, err)
	assert.NotSame(t, a, four)
	require.NoError(t, a.Close())
	b, err := m.TensorParallelLayout(2)
	require.NoError(t, err)
	assert.NotSame(t, a, b, "a closed layout is made again")
	l := m.Linears()[0]
	l.Set(l.Linear)
	_, err = b.NewSession(16, 1)
	assert.ErrorIs(t, err, ErrClosed, "the linear layers changed")
	c, err := m.TensorParallelLayout(2)
	require.NoError(t, err)
	s, err := c.NewSession(16, 1)
	require.NoError(t, err)
	_, err = s.Prefill([]int{1, 2, 3})
	require.NoError(t, err)
	s.Close()
	require.NoError(t, m.Close())
	_, err = c.NewSession(16, 1)
	assert.ErrorIs(t, err, ErrClosed, "the model closed")
}

// notDense is a linear layer of another type than Dense, for the refusal.
type notDense struct{ Linear }

// A program runs one way only: a model's with Run, a tensor-parallel one with
// RunDevices.
func TestTensorParallelProgramsRunTheirWay(t *testing.T) {
	m := randomModel(t, tpConfig(), 1)
	tp, err := m.tensorParallel(2, false)
	require.NoError(t, err)
	defer tp.Close()
	in := []shapes.Shape{shapes.Make(dtypes.Float32, 2)}
	build := func(_ *Weights, x []*Node) []*Node { return []*Node{Neg(x[0])} }
	p, err := tp.CachedProgram("neg", in, []int{sharding.Replicated}, []int{sharding.Replicated}, build)
	require.NoError(t, err)
	_, err = p.Run(tensors.FromValue([]float32{1, 2}))
	assert.ErrorContains(t, err, "model: program neg is tensor-parallel: run it with RunDevices")
	out, err := p.RunDevices([][]*tensors.Tensor{{tensors.FromValue([]float32{1, 2})}})
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, -2}, out[0][0].Value())
	_, err = p.RunDevices([][]*tensors.Tensor{{tensors.FromValue([]float32{1, 2, 3})}})
	assert.ErrorContains(t, err, "model: program neg input 0 on device 0 has shape (Float32)[3], want (Float32)[2]")
	_, err = p.RunDevices(nil)
	assert.ErrorContains(t, err, "model: program neg runs on 1 devices, got inputs for 0")

	plain, err := m.Compile("neg", in, build)
	require.NoError(t, err)
	defer plain.Graph().Finalize()
	_, err = plain.RunDevices([][]*tensors.Tensor{{tensors.FromValue([]float32{1, 2})}})
	assert.ErrorContains(t, err, "model: program neg is not tensor-parallel: run it with Run")
}
