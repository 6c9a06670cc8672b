package modelcore

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/gobackend"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// tinyConfig is a small MiniCPM-style configuration for tests that need no checkpoint.
func tinyConfig() Config {
	return Config{
		Architecture: ArchMiniCPM, VocabSize: 64, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1,
		ScaleEmb: 12, ScaleDepth: 1.4, DimModelBase: 16, MaskTokenID: 63, EOSTokenIDs: []int{2},
	}
}

// randomModel is a float32 model of cfg with random weights drawn from seed on the
// test backend, closed when the test ends.
func randomModel(t *testing.T, cfg Config, seed int64) *Model {
	t.Helper()
	m, err := NewRandom(testutil.Backend(t), cfg, dtypes.Float32, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// maxRelDiff is max |a-b| / max |b| over two logit matrices.
func maxRelDiff(t *testing.T, got, want [][]float32) float64 {
	t.Helper()
	require.Equal(t, len(want), len(got), "rows")
	var diff, scale float64
	for i := range want {
		require.Equal(t, len(want[i]), len(got[i]), "row %d", i)
		for j := range want[i] {
			diff = math.Max(diff, math.Abs(float64(got[i][j]-want[i][j])))
			scale = math.Max(scale, math.Abs(float64(want[i][j])))
		}
	}
	return diff / scale
}

// The cached path (prefill of the prompt's full blocks, then a step and a commit per
// block) must give the logits of one block-causal forward of the whole sequence.
func TestCachedPathMatchesFullForward(t *testing.T) {
	m := randomModel(t, tinyConfig(), 7)
	const block = 4
	seq := testSequence(22, m.Config.VocabSize)
	for promptLen := 1; promptLen <= 8; promptLen++ {
		t.Run(fmt.Sprintf("prompt%d", promptLen), func(t *testing.T) {
			requireCachedMatchesFull(t, m, seq, promptLen, 32, block)
		})
	}
}

// Windows attend over their cache's and their own keys and values concatenated while
// the copy is small (one-token windows, on backends that fuse elementwise work, over a
// copy of the cache holding their own: see [inOwnSlot]), with two products beyond (see
// [concatenates]): all give the full forward's logits. With 2 key/value heads of 64 in
// float32, a one-row cache of 4096 slots is past concatMaxBytes for any window.
func TestCachedPathConcatenatedAndTwoProducts(t *testing.T) {
	cfg := prefillConfig()
	cfg.MaxPositionEmbeddings = 4096
	m := randomModel(t, cfg, 3)
	const block = 4
	seq := testSequence(14, m.Config.VocabSize)
	for _, c := range []struct {
		capacity int
		concat   bool
	}{{32, true}, {4096, false}} {
		t.Run(fmt.Sprintf("capacity%d", c.capacity), func(t *testing.T) {
			for w := 1; w <= 2*block; w++ { // the widest window is the 2-block prefill
				require.Equal(t, c.concat, concatenates(m.CacheShape(1, c.capacity), w), "window of %d", w)
				require.Equal(t, c.concat && w == 1, inOwnSlot(m.CacheShape(1, c.capacity), w, false), "window of %d", w)
				require.Equal(t, w == 1, inOwnSlot(m.CacheShape(1, c.capacity), w, true), "window of %d where the backend places it", w)
			}
			requireCachedMatchesFull(t, m, seq, 2*block+1, c.capacity, block)
			requireCachedMatchesFull(t, m, seq, 3, c.capacity, 1) // one-token windows
		})
	}
}

// One-token windows over a small cache attend over a copy of it holding their own key
// (see [inOwnSlot]) on backends that fuse elementwise work, and over a cache of any
// size where the backend places windows; forced here on any backend (a
// fresh model each: programs are cached per model), they give the full forward's
// logits. With 2 key/value heads of 64 in float32, a one-row cache of 4096 slots is
// past concatMaxBytes.
func TestCachedPathOwnSlot(t *testing.T) {
	cfg := prefillConfig()
	cfg.MaxPositionEmbeddings = 4096
	for _, c := range []struct {
		capacity int
		places   bool
	}{{32, false}, {4096, true}} {
		t.Run(fmt.Sprintf("capacity%d", c.capacity), func(t *testing.T) {
			m := randomModel(t, cfg, 3)
			m.paths.fuses, m.paths.placesWindows = true, m.paths.placesWindows || c.places
			require.True(t, inOwnSlot(m.CacheShape(1, c.capacity), 1, c.places))
			requireCachedMatchesFull(t, m, testSequence(14, m.Config.VocabSize), 3, c.capacity, 1)
		})
	}
}

// testSequence is n token ids spread over the vocabulary.
func testSequence(n, vocab int) []int {
	seq := make([]int, n)
	for i := range seq {
		seq[i] = (i*37 + 5) % vocab
	}
	return seq
}

// requireCachedMatchesFull runs seq through a session of the given capacity (a prefill
// of the full blocks of its first promptLen tokens, then a step and a commit per block,
// which must agree) and requires the logits of one forward of the whole sequence.
func requireCachedMatchesFull(t *testing.T, m *Model, seq []int, promptLen, capacity, block int) {
	t.Helper()
	full, err := m.Logits(seq, block)
	require.NoError(t, err)
	s, err := m.NewSession(capacity, block)
	require.NoError(t, err)
	defer s.Close()

	got := make([][]float32, len(seq))
	cached := promptLen / block * block
	if cached > 0 {
		last, err := s.Prefill(seq[:cached])
		require.NoError(t, err)
		got[cached-1] = last
	}
	for start := cached; start < len(seq); start += block {
		end := min(start+block, len(seq))
		step, err := s.Step(seq[start:end])
		require.NoError(t, err)
		if end-start < block {
			copy(got[start:end], step)
			break
		}
		commit, err := s.Commit(seq[start:end])
		require.NoError(t, err)
		require.Less(t, maxRelDiff(t, step, commit), 1e-6, "a step and a commit of the same block differ")
		copy(got[start:end], commit)
	}
	from := max(cached-1, 0)
	require.Less(t, maxRelDiff(t, got[from:], full[from:]), 1e-5)
}

// At batch 1 a window over the cache writes all its keys into their slots (see
// [inSlots]), committing WriteLen of them: windows whose uncommitted blocks held other
// tokens (as a decoder's masked blocks do) leave those slots stale, and later windows
// still give the full forward's logits. Forced on any backend, as above.
func TestInSlotsLeavesUncommittedSlotsUnread(t *testing.T) {
	m := randomModel(t, prefillConfig(), 3)
	m.paths.fuses = true
	const block, capacity = 4, 32
	seq := testSequence(16, m.Config.VocabSize)
	full, err := m.Logits(seq, block)
	require.NoError(t, err)
	cache, err := m.NewCache(1, capacity)
	require.NoError(t, err)
	defer func() { cache.Free() }()

	// run forwards tokens at start over the cache, committing the first block.
	run := func(start int, tokens []int) [][]float32 {
		w := len(tokens)
		cacheShape := m.CacheShape(1, capacity)
		inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, w), shapes.Make(dtypes.Int32, 1)}
		for range 2 * m.Config.NumLayers {
			inputs = append(inputs, cacheShape)
		}
		p, err := m.CachedProgram(fmt.Sprintf("test/inslots/%d", w), inputs, func(wt *Weights, in []*Node) []*Node {
			win := Window{Tokens: in[0], Start: in[1], CacheLen: in[1], WriteLen: Const(in[0].Graph(), []int32{block}), BlockSize: block}
			logits, c := m.Forward(wt, win, CacheNodesFrom(in[2:]), nil)
			return append([]*Node{logits}, c.Nodes()...)
		})
		require.NoError(t, err)
		out, err := p.Run(append([]*tensors.Tensor{tokensTensor(tokens), tensors.FromValue([]int32{int32(start)})}, cache.Tensors()...)...)
		require.NoError(t, err)
		cache.Free()
		cache = CacheFromTensors(out[1:])
		rows, err := logitRows(out[0])
		require.NoError(t, err)
		return rows
	}
	junk := func(n int) []int { return testSequence(n+3, m.Config.VocabSize)[3:] }
	var got [][]float32
	// Three blocks, two of them junk (slots 4-11 stale), then blocks of the sequence
	// with a junk block after each, and a last window of one block.
	got = append(got, run(0, append(slices.Clone(seq[:4]), junk(8)...))[:4]...)
	got = append(got, run(4, append(slices.Clone(seq[4:8]), junk(4)...))[:4]...)
	got = append(got, run(8, append(slices.Clone(seq[8:12]), junk(4)...))[:4]...)
	got = append(got, run(12, seq[12:16])...)
	require.LessOrEqual(t, maxRelDiff(t, got, full), 1e-5)
}

// At batch 2 a window over the cache that writes adds all its keys into their slots
// for the attention and subtracts the uncommitted ones again (see [inSlots]): rows at
// different starts, committing different lengths (0 included) with junk in their
// uncommitted positions, give the full forward's logits. Windows of 8 positions, and
// one-token windows (causal) over a cache too large to copy (2 rows of 2048 slots of
// 2 key/value heads of 64 in float32: past concatMaxBytes), as AR decoding at batch 8
// and 64 has where the backend does not place windows (TestCachedPathOwnSlotAtBatch2:
// where it does). Forced on any backend, as above.
func TestInSlotsAtBatch2(t *testing.T) {
	cfg := prefillConfig()
	cfg.MaxPositionEmbeddings = 2048
	m := randomModel(t, cfg, 3)
	m.paths.fuses = true
	seqs := [][]int{testSequence(16, m.Config.VocabSize), testSequence(19, m.Config.VocabSize)[3:]}
	for _, c := range []struct {
		capacity, w, block int
		calls              []inSlotsCall
	}{
		{32, 8, 4, []inSlotsCall{
			{[2]int{0, 0}, [2]int{4, 8}, [2]int{4, 8}}, // row 0: a junk block after its first
			{[2]int{4, 8}, [2]int{4, 4}, [2]int{4, 0}}, // row 1 commits nothing: slots 8-15 zero again
			{[2]int{8, 8}, [2]int{8, 8}, [2]int{8, 8}},
		}},
		{2048, 1, 1, []inSlotsCall{
			{[2]int{0, 0}, [2]int{1, 0}, [2]int{1, 0}}, // row 1: junk in slot 0, not committed
			{[2]int{1, 0}, [2]int{1, 1}, [2]int{1, 1}},
			{[2]int{2, 1}, [2]int{1, 1}, [2]int{0, 1}}, // row 0 commits nothing
			{[2]int{2, 2}, [2]int{1, 1}, [2]int{1, 1}},
		}},
	} {
		t.Run(fmt.Sprintf("window%d", c.w), func(t *testing.T) {
			require.False(t, inOwnSlot(m.CacheShape(2, c.capacity), c.w, false))
			requireInSlotsMatchFull(t, m, seqs, c.capacity, c.w, c.block, c.calls)
		})
	}
}

// inSlotsCall is one forward of inSlotsRunner's: each row r's window at starts[r], its
// first ns[r] positions real tokens (junk after them), writing writes[r].
type inSlotsCall struct{ starts, ns, writes [2]int }

// requireInSlotsMatchFull runs calls in order through an inSlotsRunner of windows of w
// positions over a cache of capacity slots, and requires each row's logits of its real
// positions within 1e-5 of the full forward of seqs[r] (rows with none are junk alone).
func requireInSlotsMatchFull(t *testing.T, m *Model, seqs [][]int, capacity, w, block int, calls []inSlotsCall) {
	t.Helper()
	var full [][][]float32
	for _, seq := range seqs {
		f, err := m.Logits(seq, block)
		require.NoError(t, err)
		full = append(full, f)
	}
	run := inSlotsRunner(t, m, capacity, w, block)
	for _, call := range calls {
		rows := run(seqs, call.starts, call.ns, call.writes)
		for r := range 2 {
			if call.ns[r] == 0 {
				continue // junk alone
			}
			want := full[r][call.starts[r] : call.starts[r]+call.ns[r]]
			require.LessOrEqual(t, maxRelDiff(t, rows[r], want), 1e-5, "window %d, row %d at %d", w, r, call.starts[r])
		}
	}
}

// inSlotsRunner compiles a forward of windows of w positions at batch 2 over a cache of
// capacity slots that it keeps between calls. The function it returns forwards each
// row r's tokens seqs[r][starts[r]:starts[r]+ns[r]], junk after them, writing
// writes[r], and returns each row's logits of its ns[r] positions.
func inSlotsRunner(t *testing.T, m *Model, capacity, w, block int) func(seqs [][]int, starts, ns, writes [2]int) [][][]float32 {
	cache, err := m.NewCache(2, capacity)
	require.NoError(t, err)
	t.Cleanup(func() { cache.Free() })
	vec := shapes.Make(dtypes.Int32, 2)
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 2, w), vec, vec}
	for range 2 * m.Config.NumLayers {
		inputs = append(inputs, m.CacheShape(2, capacity))
	}
	p, err := m.CachedProgram(fmt.Sprintf("test/inslots/batch2/%d/%d", capacity, w), inputs, func(wt *Weights, in []*Node) []*Node {
		win := Window{Tokens: in[0], Start: in[1], CacheLen: in[1], WriteLen: in[2], BlockSize: block}
		logits, c := m.Forward(wt, win, CacheNodesFrom(in[3:]), nil)
		return append([]*Node{logits}, c.Nodes()...)
	})
	require.NoError(t, err)
	junk := testSequence(w+7, m.Config.VocabSize)[7:]
	return func(seqs [][]int, starts, ns, writes [2]int) [][][]float32 {
		ids := make([]int32, 0, 2*w)
		for r := range 2 {
			for i := range w {
				t := junk[i]
				if i < ns[r] {
					t = seqs[r][starts[r]+i]
				}
				ids = append(ids, int32(t))
			}
		}
		out, err := p.Run(append([]*tensors.Tensor{tensors.FromFlatDataAndDimensions(ids, 2, w),
			tensors.FromValue([]int32{int32(starts[0]), int32(starts[1])}),
			tensors.FromValue([]int32{int32(writes[0]), int32(writes[1])})}, cache.Tensors()...)...)
		require.NoError(t, err)
		cache.Free()
		cache = CacheFromTensors(out[1:])
		logits, err := tensors.CopyFlatData[float32](out[0])
		require.NoError(t, err)
		vocab := m.Config.VocabSize
		rows := make([][][]float32, 2)
		for r := range 2 {
			for i := range ns[r] {
				rows[r] = append(rows[r], logits[(r*w+i)*vocab:(r*w+i+1)*vocab])
			}
		}
		return rows
	}
}

// Windows over the cache in their slots ask for the fused attention where the backend
// offers a kernel for it (backend.FusedAttentionOverCache, our Triton kernel on the
// GPU); forced here on the Go backend, whose fused op takes the same BHSD operands and
// mask (skipped on backends whose fused op takes no mask), they give the full forward's
// logits: at batch 2 (windows of 8 positions and of one over a cache too large to copy,
// with junk in uncommitted positions), and at batch 1 (windows of 4 writing in place,
// one-token windows in their own slot).
func TestFusedAttentionOverCache(t *testing.T) {
	cfg := prefillConfig()
	cfg.MaxPositionEmbeddings = 2048
	m := randomModel(t, cfg, 3)
	m.paths.fuses, m.paths.fusedOverCache = true, true

	// The Go backend takes the op as the model asks for it, so the paths below run it.
	g := NewGraph(m.backend, "over-cache")
	q := IotaFull(g, shapes.Make(dtypes.Float32, 2, 4, 3, 8))
	k := IotaFull(g, shapes.Make(dtypes.Float32, 2, 2, 16, 8))
	visible := LessThan(Iota(g, shapes.Make(dtypes.Int32, 2, 3, 16), 2), Const(g, int32(5)))
	if fusedAttention(q, k, k, compute.AttentionAxesLayoutBHSD, &fusedMasks{mask: visible}, 0.1) == nil {
		require.NotEqual(t, gobackend.BackendName, m.backend.Name(), "the Go backend's fused attention takes a mask")
		t.Skipf("backend %q has no fused attention taking a mask, which this test forces (it runs on the Go backend)", m.backend.Name())
	}

	seqs := [][]int{testSequence(16, m.Config.VocabSize), testSequence(19, m.Config.VocabSize)[3:]}
	requireInSlotsMatchFull(t, m, seqs, 32, 8, 4, []inSlotsCall{
		{[2]int{0, 0}, [2]int{4, 8}, [2]int{4, 8}}, {[2]int{4, 8}, [2]int{4, 4}, [2]int{4, 0}}})
	requireInSlotsMatchFull(t, m, seqs, 2048, 1, 1, []inSlotsCall{
		{[2]int{0, 0}, [2]int{1, 0}, [2]int{1, 0}}, {[2]int{1, 0}, [2]int{1, 1}, [2]int{1, 1}}})
	requireCachedMatchesFull(t, m, seqs[0], 5, 32, 4)
	requireCachedMatchesFull(t, m, seqs[0], 3, 32, 1)
}

// Windows at batch 1 that write nothing (a session's steps) attend over a copy of the
// cache holding their keys in their slots where the backend places windows
// (backend.PlacesWindows, our attention kernel on the GPU), rather than over cache and
// window concatenated; forced here on the Go backend, with the plain attention and with
// the fused op the GPU takes, they give the full forward's logits.
func TestCachedPathPlacesWindows(t *testing.T) {
	probe := randomModel(t, prefillConfig(), 3)
	g := NewGraph(probe.backend, "places-windows")
	start := Const(g, []int32{4})
	win := Window{Tokens: Const(g, [][]int32{{1, 2, 3, 4}}), Start: start, CacheLen: start, BlockSize: 4}
	cache := &CacheNodes{K: []*Node{Zeros(g, probe.CacheShape(1, 32))}}
	pos := positions(start, 4)
	require.Nil(t, attentionMask(win, pos, cache, true, false).inSlots, "a window that writes nothing concatenates")
	require.NotNil(t, attentionMask(win, pos, cache, true, true).inSlots, "unless the backend places windows")

	for _, overCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("fused=%v", overCache), func(t *testing.T) {
			m := randomModel(t, prefillConfig(), 3)
			m.paths.fuses, m.paths.placesWindows, m.paths.fusedOverCache = true, true, m.paths.fusedOverCache || overCache
			requireCachedMatchesFull(t, m, testSequence(14, m.Config.VocabSize), 5, 32, 4)
		})
	}
}

// One-token windows at batch 2 over a cache too large to copy take their own slot where
// the backend places windows (forced here on the Go backend, which makes the copy) and
// give the full forward's logits, rows committing or not as in TestInSlotsAtBatch2.
func TestCachedPathOwnSlotAtBatch2(t *testing.T) {
	cfg := prefillConfig()
	cfg.MaxPositionEmbeddings = 2048
	m := randomModel(t, cfg, 3)
	m.paths.fuses, m.paths.placesWindows = true, true
	require.True(t, inOwnSlot(m.CacheShape(2, 2048), 1, true))
	require.False(t, concatenates(m.CacheShape(2, 2048), 1))
	seqs := [][]int{testSequence(16, m.Config.VocabSize), testSequence(19, m.Config.VocabSize)[3:]}
	requireInSlotsMatchFull(t, m, seqs, 2048, 1, 1, []inSlotsCall{
		{[2]int{0, 0}, [2]int{1, 0}, [2]int{1, 0}}, // row 1: junk in slot 0, not committed
		{[2]int{1, 0}, [2]int{1, 1}, [2]int{1, 1}},
		{[2]int{2, 1}, [2]int{1, 1}, [2]int{0, 1}}, // row 0 commits nothing
		{[2]int{2, 2}, [2]int{1, 1}, [2]int{1, 1}},
	})
}
