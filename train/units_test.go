package train

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// Token-ids files round-trip; malformed ones are errors that say what is wrong.
func TestReadTokens(t *testing.T) {
	want := &Tokens{Vocab: 300, IDs: []uint16{256, 1, 299, 257}}
	path := filepath.Join(t.TempDir(), "ids.bin")
	require.NoError(t, os.WriteFile(path, want.Bytes(), 0o644))
	got, err := ReadTokens(path)
	require.NoError(t, err)
	require.Equal(t, want, got)

	header := func(magic string, vocab, reserved uint32) []byte {
		b := append([]byte(magic), make([]byte, 8)...)
		binary.LittleEndian.PutUint32(b[8:], vocab)
		binary.LittleEndian.PutUint32(b[12:], reserved)
		return b
	}
	for _, c := range []struct {
		data []byte
		err  string
	}{
		{[]byte("bdids00"), "shorter than the 16-byte header"},
		{header("bdids002", 300, 0), "magic"},
		{header("bdids001", 0, 0), "vocabulary size 0"},
		{header("bdids001", 1<<16+1, 0), "vocabulary size 65537"},
		{header("bdids001", 300, 7), "reserved"},
		{append(header("bdids001", 300, 0), 1), "not a whole number"},
		{append(header("bdids001", 300, 0), 0x2c, 0x01), "id 300 at index 0"},
	} {
		_, err := ParseTokens(c.data)
		require.ErrorContains(t, err, c.err)
	}
	_, err = ReadTokens(filepath.Join(t.TempDir(), "absent"))
	require.Error(t, err)
}

// Rows restart segments and positions at each BOS after the first token.
func TestRowSegmentsAndPositions(t *testing.T) {
	r := newRows(2, 6)
	r.setRow(0, []uint16{5, 6, 9, 7, 9, 8}, 9)
	r.setRow(1, []uint16{9, 1, 2}, 9)
	require.Equal(t, []int32{5, 6, 9, 7, 9, 8, 9, 1, 2, PadToken, PadToken, PadToken}, r.Tokens)
	require.Equal(t, []int32{0, 0, 1, 1, 2, 2, 0, 0, 0, -1, -1, -1}, r.Segments)
	require.Equal(t, []int32{0, 1, 0, 1, 0, 1, 0, 1, 2, 0, 0, 0}, r.Positions)
}

// Each epoch visits every window of the data once, in an order that depends on the
// seed and the epoch; a restored sampler continues as the original.
func TestSampler(t *testing.T) {
	data := &Tokens{Vocab: 1000}
	for i := range 200 {
		data.IDs = append(data.IDs, uint16(i))
	}
	const seqLen = 16
	s, err := NewSampler(data, seqLen, 999, 7)
	require.NoError(t, err)
	windows := len(s.order)
	require.Equal(t, (len(data.IDs)-1-s.offset)/seqLen, windows)
	seen := map[int32]bool{}
	for range windows {
		r := s.Next(1)
		require.Zero(t, (int(r.Tokens[0])-s.offset)%seqLen, "windows start at the offset plus a multiple of the length")
		require.False(t, seen[r.Tokens[0]], "window %d twice", r.Tokens[0])
		seen[r.Tokens[0]] = true
		for j := 1; j <= seqLen; j++ {
			require.Equal(t, r.Tokens[0]+int32(j), r.Tokens[j])
		}
	}
	require.Equal(t, SamplerState{Seed: 7, Epoch: 0, Next: int64(windows)}, s.State())
	s.Next(3)
	state := s.State()
	require.Equal(t, int64(1), state.Epoch)
	want := s.Next(5)

	other, err := NewSampler(data, seqLen, 999, 7)
	require.NoError(t, err)
	require.NoError(t, other.Restore(state))
	require.Equal(t, want, other.Next(5))
	require.Error(t, other.Restore(SamplerState{Seed: 7, Next: 1 << 40}))

	_, err = NewSampler(&Tokens{Vocab: 10, IDs: make([]uint16, 32)}, seqLen, 0, 1)
	require.ErrorContains(t, err, "too few")
}

// Evaluation rows make every token but the first a target exactly once.
func TestEvalRowsCoverEveryTarget(t *testing.T) {
	data := &Tokens{Vocab: 100}
	for i := range 45 {
		data.IDs = append(data.IDs, uint16(i))
	}
	targets := map[int32]int{}
	for r := range evalRows(data, 8, 3, 99) {
		for i := range r.Rows {
			for j := 1; j < r.Width; j++ {
				if tok := r.Tokens[i*r.Width+j]; tok != PadToken {
					targets[tok]++
				}
			}
		}
	}
	require.Len(t, targets, len(data.IDs)-1)
	for tok, n := range targets {
		require.Equal(t, 1, n, "token %d", tok)
	}
}

// runGraph compiles and runs a small graph on the test backend.
func runGraph(t *testing.T, build func(g *Graph) []*Node) []*tensors.Tensor {
	t.Helper()
	g := NewGraph(testutil.Backend(t), t.Name())
	defer g.Finalize()
	require.NoError(t, g.Compile(build(g)...))
	return g.Run()
}

// The schedule warms up linearly, decays along a cosine to Min at Total and stays
// there; the graph computes what the host does.
func TestSchedule(t *testing.T) {
	s := Schedule{Peak: 1e-3, Min: 1e-4, Warmup: 10, Total: 110}
	want := map[int]float64{
		0: 1e-4, 4: 5e-4, 9: 1e-3, 10: 1e-3, 60: 5.5e-4, 110: 1e-4, 200: 1e-4,
		35: 1e-4 + 0.5*9e-4*(1+math.Cos(math.Pi/4)),
	}
	for step, lr := range want {
		require.InDelta(t, lr, s.LR(step), 1e-12, "step %d", step)
	}
	steps := []int32{0, 4, 9, 10, 35, 60, 109, 110, 200}
	out := runGraph(t, func(g *Graph) []*Node {
		var nodes []*Node
		for _, step := range steps {
			nodes = append(nodes, s.node(Const(g, step)))
		}
		return nodes
	})
	for i, step := range steps {
		got := tensors.MustCopyFlatData[float32](out[i])[0]
		require.InDelta(t, s.LR(int(step)), float64(got), 1e-9, "step %d", step)
	}
	noDecay := Schedule{Peak: 2, Min: 1, Warmup: 5, Total: 5}
	require.Equal(t, 1.0, noDecay.LR(5))
}

// Three AdamW steps on a small tensor match PyTorch's algorithm computed by hand in
// float64, with and without weight decay.
func TestAdamWMatchesReference(t *testing.T) {
	a := AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	p0 := []float32{0.5, -1.25, 2, 0.001}
	grads := [][]float32{{0.1, -0.2, 0.3, 0}, {-0.05, 0.4, 0.1, 1e-4}, {0.2, 0.2, -0.3, -2}}
	lrs := []float64{1e-2, 5e-3, 2e-3}
	for _, decays := range []bool{true, false} {
		// Reference, in float64.
		p, m, v := make([]float64, len(p0)), make([]float64, len(p0)), make([]float64, len(p0))
		for i := range p {
			p[i] = float64(p0[i])
		}
		for step, g := range grads {
			lr, tt := lrs[step], float64(step+1)
			for i := range p {
				if decays {
					p[i] *= 1 - lr*a.WeightDecay
				}
				m[i] = a.Beta1*m[i] + (1-a.Beta1)*float64(g[i])
				v[i] = a.Beta2*v[i] + (1-a.Beta2)*float64(g[i])*float64(g[i])
				denom := math.Sqrt(v[i])/math.Sqrt(1-math.Pow(a.Beta2, tt)) + a.Eps
				p[i] -= lr / (1 - math.Pow(a.Beta1, tt)) * m[i] / denom
			}
		}
		out := runGraph(t, func(g *Graph) []*Node {
			pn, mn, vn := Const(g, p0), Zeros(g, shapes.Make(dtypes.Float32, len(p0))), Zeros(g, shapes.Make(dtypes.Float32, len(p0)))
			for step, gr := range grads {
				pn, mn, vn = a.update(pn, Const(g, gr), mn, vn, Const(g, float32(lrs[step])), Const(g, float32(step+1)), decays)
			}
			return []*Node{pn, mn, vn}
		})
		got := tensors.MustCopyFlatData[float32](out[0])
		for i := range p {
			require.InDelta(t, p[i], float64(got[i]), 1e-6*math.Max(1, math.Abs(p[i])), "decays %v, p[%d]", decays, i)
		}
		gotM, gotV := tensors.MustCopyFlatData[float32](out[1]), tensors.MustCopyFlatData[float32](out[2])
		for i := range m {
			require.InDelta(t, m[i], float64(gotM[i]), 1e-6)
			require.InDelta(t, v[i], float64(gotV[i]), 1e-6)
		}
	}
}

// Gradients above the bound are scaled to it as a whole; below it they stay.
func TestClipByGlobalNorm(t *testing.T) {
	out := runGraph(t, func(g *Graph) []*Node {
		grads := []*Node{Const(g, []float32{3, 0}), Const(g, []float32{0, 4})} // norm 5
		clipped, norm := clipByGlobalNorm(grads, 1)
		kept, _ := clipByGlobalNorm(grads, 10)
		return []*Node{norm, clipped[0], clipped[1], kept[0], kept[1]}
	})
	require.InDelta(t, 5, tensors.MustCopyFlatData[float32](out[0])[0], 1e-6)
	require.InDeltaSlice(t, []float32{0.6, 0}, tensors.MustCopyFlatData[float32](out[1]), 1e-6)
	require.InDeltaSlice(t, []float32{0, 0.8}, tensors.MustCopyFlatData[float32](out[2]), 1e-6)
	require.Equal(t, []float32{3, 0}, tensors.MustCopyFlatData[float32](out[3]))
	require.Equal(t, []float32{0, 4}, tensors.MustCopyFlatData[float32](out[4]))
}

// FlopsPerToken counts 6 flops per weight of the linear layers and the head, plus the
// attention's.
func TestFlopsPerToken(t *testing.T) {
	cfg := microConfig() // h 32, 4 heads and 2 KV heads of 8, FFN 64, vocab 260, 2 layers
	perLayer := 32*(4+4)*8 + 32*32 + 2*32*64 + 64*32
	n := 2*perLayer + 260*32
	require.Equal(t, float64(6*n+12*2*64*4*8), FlopsPerToken(cfg, 64))
}
