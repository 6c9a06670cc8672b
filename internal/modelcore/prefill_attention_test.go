package modelcore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/testutil"
)

// prefillConfig is a small model whose attention shapes the cuDNN flash lowering
// accepts (grouped query heads, head dimension a multiple of 8).
func prefillConfig() Config {
	cfg := tinyConfig()
	cfg.HiddenSize, cfg.IntermediateSize = 128, 192
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 4, 2, 64
	return cfg
}

// prefillOutputs compiles a prefill as the decoder runs it (a window into an empty
// cache, nothing read from it) with the model's current prefill attention, runs it on two
// rows starting at positions 0 and 3 (so blocks straddle the window differently per
// row) and returns the logits of both rows and the last layer's written keys, as rows,
// and whether the graph holds a fused attention node.
func prefillOutputs(t *testing.T, m *Model, tokens [][]int32, blockSize int) (logits, keys [][]float32, fused bool) {
	t.Helper()
	b, w := len(tokens), len(tokens[0])
	name := fmt.Sprintf("test/prefill/%s/%d/%d", m.paths.prefill, blockSize, m.paths.partsFrom)
	p, err := m.Compile(name, []shapes.Shape{shapes.Make(dtypes.Int32, b, w), shapes.Make(dtypes.Int32, b)},
		func(wt *Weights, in []*Node) []*Node {
			g := in[0].Graph()
			cache := &CacheNodes{}
			for range m.Config.NumLayers {
				cache.K = append(cache.K, Zeros(g, m.CacheShape(b, w+3)))
				cache.V = append(cache.V, Zeros(g, m.CacheShape(b, w+3)))
			}
			writeLen := Const(g, []int32{int32(w), int32(w)})
			logits, cache := m.Forward(wt, Window{Tokens: in[0], Start: in[1], WriteLen: writeLen, BlockSize: blockSize}, cache, nil)
			return []*Node{logits, ConvertDType(cache.K[m.Config.NumLayers-1], dtypes.Float32)}
		})
	require.NoError(t, err)
	defer p.Graph().Finalize()
	for _, n := range p.Graph().Nodes() {
		fused = fused || n.Type() == NodeTypeFusedScaledDotProductAttention
	}
	flat := make([]int32, 0, b*w)
	for _, row := range tokens {
		flat = append(flat, row...)
	}
	out, err := p.Run(tensors.FromFlatDataAndDimensions(flat, b, w), tensors.FromValue([]int32{0, 3}))
	require.NoError(t, err)
	for _, o := range out {
		defer func() { _ = o.FinalizeAll() }()
	}
	rows := func(x *tensors.Tensor) [][]float32 {
		data, err := tensors.CopyFlatData[float32](x)
		require.NoError(t, err)
		n := x.Shape().Dimensions[x.Rank()-1]
		var r [][]float32
		for i := 0; i < len(data); i += n {
			r = append(r, data[i:i+n])
		}
		return r
	}
	return rows(out[0]), rows(out[1]), fused
}

// The fused prefill attention gives the plain path's logits and cache, within bf16's
// resolution in bfloat16 and float32 rounding in float32, for block-causal (blocks of 4,
// not aligned with either row's start) and causal windows. Where the backend declines
// the fused op (bfloat16 on the Go backend and on XLA's CPU plugin, float32 on XLA) both
// sides run the plain path, which the log says.
func TestFusedPrefillMatchesPlain(t *testing.T) {
	b := testutil.Backend(t)
	for _, c := range []struct {
		dtype dtypes.DType
		tol   float64
	}{{dtypes.BFloat16, 2e-2}, {dtypes.Float32, logitTolerance}} {
		t.Run(c.dtype.String(), func(t *testing.T) {
			m, err := NewRandom(b, prefillConfig(), c.dtype, 5)
			require.NoError(t, err)
			defer m.Close()
			const w = 37
			tokens := make([][]int32, 2)
			for r := range tokens {
				for i := range w {
					tokens[r] = append(tokens[r], int32((i*13+r*7+1)%m.Config.VocabSize))
				}
			}
			for _, block := range []int{4, 1} {
				t.Run(fmt.Sprintf("block%d", block), func(t *testing.T) {
					m.paths.prefill = prefillPlain
					wantLogits, wantKeys, fused := prefillOutputs(t, m, tokens, block)
					require.False(t, fused, "plain path built a fused attention node")
					m.paths.prefill = prefillFused
					gotLogits, gotKeys, fused := prefillOutputs(t, m, tokens, block)
					t.Logf("fused op taken by the backend: %v", fused)
					rel := maxRelDiff(t, gotLogits, wantLogits)
					relKeys := maxRelDiff(t, gotKeys, wantKeys)
					t.Logf("max |Δ| / max |plain|: logits %.2g, last layer's keys %.2g", rel, relKeys)
					require.LessOrEqual(t, rel, c.tol)
					require.LessOrEqual(t, relKeys, c.tol)
					if block > 1 { // and by parts, where the backend gives its log-sum-exps
						m.paths.partsFrom = 1
						defer func() { m.paths.partsFrom = byPartsMinWindow }()
						gotLogits, _, _ = prefillOutputs(t, m, tokens, block)
						rel = maxRelDiff(t, gotLogits, wantLogits)
						t.Logf("by parts (causal and later keys, %v): max |Δ| / max |plain| %.2g", backend.AttentionLogSumExp(b), rel)
						require.LessOrEqual(t, rel, c.tol)
					}
				})
			}
			m.paths.prefill = prefillAuto
			_, _, fused := prefillOutputs(t, m, tokens, 4)
			t.Logf("auto: fused op taken: %v", fused)
			if c.dtype == dtypes.Float32 {
				require.False(t, fused, "auto must keep float32 models on the plain path")
			}
		})
	}
}

// BenchmarkPrefillAttention times a 512-token prefill of the CPU benchmark model in
// float32 with the plain and the fused attention (the Go backend's float32 kernel).
func BenchmarkPrefillAttention(b *testing.B) {
	m, err := NewRandom(testutil.Backend(b), benchConfig(), dtypes.Float32, 1)
	require.NoError(b, err)
	defer m.Close()
	const w = 512
	ids := make([]int32, w)
	for i := range ids {
		ids[i] = int32((i * 31) % m.Config.VocabSize)
	}
	in := tensors.FromFlatDataAndDimensions(ids, 1, w)
	for _, mode := range []prefillAttention{prefillPlain, prefillFused} {
		b.Run(mode.String(), func(b *testing.B) {
			m.paths.prefill = mode
			p, err := m.Compile("bench/prefill/"+mode.String(), []shapes.Shape{in.Shape()}, func(wt *Weights, in []*Node) []*Node {
				g := in[0].Graph()
				logits, _ := m.Forward(wt, Window{Tokens: in[0], Start: Const(g, []int32{0}), BlockSize: 4,
					LogitIndices: Const(g, [][]int32{{w - 1}})}, nil, nil)
				return []*Node{logits}
			})
			require.NoError(b, err)
			defer p.Graph().Finalize()
			for b.Loop() {
				out, err := p.Run(in)
				require.NoError(b, err)
				_, err = tensors.CopyFlatData[float32](out[0])
				require.NoError(b, err)
				_ = out[0].FinalizeAll()
			}
		})
	}
}

// The additive bias the fused path hands to XLA's cuDNN lowering ([b, heads, w, w], the
// op's [B, H, S, Skv] convention) is the block-causal mask: softmax of scores plus the
// bias equals the masked softmax, for rows starting at different positions. (On the CPU
// backends the fused op takes the boolean mask or declines, so this checks the bias the
// GPU sees.)
func TestFusedBiasIsTheBlockCausalMask(t *testing.T) {
	const b, w, heads = 2, 11, 4
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]float32, b*heads*w*w)
	for i := range data {
		data[i] = float32(3 * rng.NormFloat64())
	}
	scores := tensors.FromFlatDataAndDimensions(data, b, heads, w, w) // [b, heads, q, k]
	out, err := ExecOnce(testutil.Backend(t), func(scores *Node) *Node {
		g := scores.Graph()
		pos := positions(Const(g, []int32{0, 3}), w)
		f := newFusedMasks(attentionMask(Window{BlockSize: 4}, pos, nil, false, false).window, false, false, nil, 4)
		withBias := Softmax(Add(scores, f.additiveBias(heads, dtypes.Float32)), -1)
		mask := BroadcastToShape(InsertAxes(f.mask, 1), scores.Shape())
		withMask := Softmax(Where(mask, scores, Infinity(g, dtypes.Float32, -1)), -1)
		return ReduceAllMax(Abs(Sub(withBias, withMask)))
	}, scores)
	require.NoError(t, err)
	diff := tensors.ToScalar[float32](out)
	t.Logf("max |Δ| = %.2g", diff)
	require.LessOrEqual(t, diff, float32(1e-6))
}

// mergeLaterKeys turns causal attention, given as its output and log-sum-exps, into the
// block-causal attention of windows whose blocks straddle them (rows starting at
// positions 0 and 3, blocks of 4, a window of 11) with grouped query heads.
func TestMergeLaterKeysIsBlockCausal(t *testing.T) {
	const b, w, heads, kvHeads, d = 2, 11, 4, 2, 8
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(dims ...int) *tensors.Tensor {
		data := make([]float32, shapes.Make(dtypes.Float32, dims...).Size())
		for i := range data {
			data[i] = float32(rng.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	}
	out, err := ExecOnce(testutil.Backend(t), func(q, k, v *Node) *Node {
		g := q.Graph()
		pos := positions(Const(g, []int32{0, 3}), w)
		f := newFusedMasks(attentionMask(Window{BlockSize: 4}, pos, nil, false, false).window, false, true, pos, 4)
		scale := 1 / math.Sqrt(d)
		// Plain attention [b, heads, w, d] under a visibility mask [b, w, w].
		group := heads / kvHeads
		scores := MulScalar(Dot(Reshape(q, b, w, kvHeads, group, d), k).General([]int{4}, []int{0, 2}, []int{3}, []int{0, 2}), scale) // [b, kvHeads, w, group, w]
		attend := func(visible *Node) (*Node, *Node) {
			visible = BroadcastToShape(Reshape(visible, b, 1, w, 1, w), scores.Shape())
			masked := Where(visible, scores, Infinity(g, dtypes.Float32, -1))
			top := ReduceAndKeep(masked, ReduceMax, -1)
			lse := Add(Log(ReduceSum(Exp(Sub(masked, top)), -1)), Squeeze(top, -1)) // [b, kvHeads, w, group]
			probs := Softmax(masked, -1)
			o := Dot(probs, v).General([]int{4}, []int{0, 1}, []int{1}, []int{0, 2}) // [b, kvHeads, w, group, d]
			o = Reshape(TransposeAllAxes(o, 0, 2, 1, 3, 4), b, w, heads, d)
			return o, Reshape(TransposeAllAxes(lse, 0, 1, 3, 2), b, heads, w)
		}
		causal := GreaterOrEqual(Iota(g, shapes.Make(dtypes.Int32, 1, w, w), 1), Iota(g, shapes.Make(dtypes.Int32, 1, w, w), 2))
		causalOut, lse := attend(BroadcastToDims(causal, b, w, w))
		want, _ := attend(f.mask)
		got := mergeLaterKeys(causalOut, lse, q, k, v, f.laterKeys, scale)
		return ReduceAllMax(Abs(Sub(got, want)))
	}, random(b, w, heads, d), random(b, w, kvHeads, d), random(b, w, kvHeads, d))
	require.NoError(t, err)
	diff := tensors.ToScalar[float32](out)
	t.Logf("max |merged - block-causal| = %.2g", diff)
	require.LessOrEqual(t, diff, float32(1e-5))
}
