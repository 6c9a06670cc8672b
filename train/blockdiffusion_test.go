package train

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

func tinyDiffusionConfig() model.Config {
	return model.Config{
		Architecture: model.ArchLlama, VocabSize: 48, HiddenSize: 16, IntermediateSize: 24,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 4, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeAttentionFactor: 1, TieWordEmbeddings: true,
		ScaleEmb: 1, DimModelBase: 16, BOSTokenID: 1, EOSTokenIDs: []int{2}, MaskTokenID: 47,
	}
}

func tinyDiffusionModel(t *testing.T) *model.Model {
	t.Helper()
	b, _, err := backend.New()
	require.NoError(t, err)
	m, err := model.NewRandom(b, tinyDiffusionConfig(), dtypes.Float32, 5)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// noisedHost is what buildNoised computes, from its definition, on the host.
type noisedHost struct {
	tokens  [][]int32
	visible [][][]bool
	targets [][]int32
	masked  [][]float32
	anchor  [][]float32
	guess   [][]float32
	// firstMasks are the noisy rows q with q clean and q+1 to its block's end masked.
	firstMasks [][]float32
}

func referenceNoised(x0, segs [][]int32, blockSize int, rates, u [][]float32, o BlockDiffusion) noisedHost {
	b, l := len(x0), len(x0[0])
	var h noisedHost
	masks := make([][]bool, 2*b)
	for c := range 2 {
		for i := range b {
			row := make([]bool, l)
			for p := range l {
				t := float64(rates[i][p/blockSize])*(1-o.MinRate) + o.MinRate
				hit := float64(u[i][p]) < t
				row[p] = p%blockSize != 0 && hit == (c == 0) && segs[i][p] >= 0
			}
			masks[c*b+i] = row
		}
	}
	for r := range 2 * b {
		i := r % b
		toks := make([]int32, 2*l)
		for p := range l {
			toks[p], toks[l+p] = max(x0[i][p], 0), max(x0[i][p], 0)
			if masks[r][p] {
				toks[p] = int32(o.MaskID)
			}
		}
		h.tokens = append(h.tokens, toks)
	}
	for r := range 2 * b {
		var vis [][]bool
		for q := range 2 * l {
			row := make([]bool, 2*l)
			for k := range 2 * l {
				qc, kc := q >= l, k >= l
				qb, kb := (q%l)/blockSize, (k%l)/blockSize
				row[k] = (!qc && !kc && qb == kb) || (!qc && kc && qb > kb) || (qc && kc && qb >= kb)
				row[k] = (row[k] && segs[r%b][q%l] == segs[r%b][k%l]) || q == k
			}
			vis = append(vis, row)
		}
		h.visible = append(h.visible, vis)
	}
	var rows []int
	for p := range l {
		rows = append(rows, p)
	}
	for p := 3; p < l; p += 4 {
		rows = append(rows, l+p)
	}
	for r := range 2 * b {
		var tg []int32
		var ms, an, gs []float32
		for _, row := range rows {
			noisy := row < l
			next := row%l + 1
			in := next < l
			tg = append(tg, max(x0[r%b][min(next, l-1)], 0))
			in = in && segs[r%b][row%l] == segs[r%b][min(next, l-1)] && segs[r%b][min(next, l-1)] >= 0
			m, a, g := float32(0), float32(0), float32(0)
			if in && noisy && masks[r][next] {
				m = 1
			}
			if in && next%blockSize == 0 {
				if noisy {
					g = 1
				} else {
					a = 1
				}
			}
			ms, an, gs = append(ms, m), append(an, a), append(gs, g)
		}
		h.targets, h.masked, h.anchor, h.guess = append(h.targets, tg), append(h.masked, ms), append(h.anchor, an), append(h.guess, gs)
		fm := make([]float32, l)
		for q := range l - 1 {
			p := q + 1
			if p%blockSize == 0 || masks[r][q] || segs[r%b][q] != segs[r%b][p] || segs[r%b][p] < 0 {
				continue
			}
			tail := true
			for k := p; k < (p/blockSize+1)*blockSize; k++ {
				tail = tail && masks[r][k]
			}
			if tail {
				fm[q] = 1
			}
		}
		h.firstMasks = append(h.firstMasks, fm)
	}
	return h
}

func TestBuildNoisedMatchesDefinition(t *testing.T) {
	m := tinyDiffusionModel(t)
	o := DefaultBlockDiffusion(m.Config.MaskTokenID)
	const b, l = 2, 16
	x0, segs := make([][]int32, b), make([][]int32, b)
	rates, u := make([][]float32, b), make([][]float32, b)
	for i := range b {
		x0[i], segs[i], rates[i], u[i] = make([]int32, l), make([]int32, l), make([]float32, l), make([]float32, l)
		for p := range l {
			x0[i][p] = int32((i*11 + p*5 + 3) % 40)
			if i == 1 && p >= 6 { // a second document from position 6, pads from 14
				segs[i][p] = 1
			}
			if i == 1 && p >= 14 {
				x0[i][p], segs[i][p] = -1, -1 // pads
			}
			rates[i][p] = float32((i*7+p*3)%10) / 10
			u[i][p] = float32((i*3+p*7)%11) / 11
		}
	}
	for _, blockSize := range []int{4, 8} {
		want := referenceNoised(x0, segs, blockSize, rates, u, o)
		inputs := []shapes.Shape{shapes.Make(dtypes.Int32, b, l), shapes.Make(dtypes.Int32, b, l), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Float32, b, l), shapes.Make(dtypes.Float32, b, l)}
		p, err := modelcore.Of(m).Compile("noised", inputs, func(_ *modelcore.Weights, in []*Node) []*Node {
			nw := o.buildNoised(in[0], in[1], in[2], in[3], in[4])
			return []*Node{nw.win.Tokens, nw.win.Visible, nw.targets, nw.masked, nw.anchor, nw.guess, nw.firstMasks}
		})
		require.NoError(t, err)
		out, err := p.Run(tensors.FromValue(x0), tensors.FromValue(segs), tensors.FromValue(int32(blockSize)), tensors.FromValue(rates), tensors.FromValue(u))
		require.NoError(t, err)
		require.Equal(t, want.tokens, out[0].Value(), "tokens, block %d", blockSize)
		require.Equal(t, want.visible, out[1].Value(), "visibility, block %d", blockSize)
		require.Equal(t, want.targets, out[2].Value(), "targets, block %d", blockSize)
		require.Equal(t, want.masked, out[3].Value(), "masked rows, block %d", blockSize)
		require.Equal(t, want.anchor, out[4].Value(), "anchor rows, block %d", blockSize)
		require.Equal(t, want.guess, out[5].Value(), "guess rows, block %d", blockSize)
		require.Equal(t, want.firstMasks, out[6].Value(), "rows before a masked tail, block %d", blockSize)
		sum := func(rows [][]float32) (s float32) {
			for _, row := range rows {
				for _, v := range row {
					s += v
				}
			}
			return s
		}
		require.Positive(t, sum(want.masked), "the draws mask something")
		require.Positive(t, sum(want.firstMasks), "the draws leave masked tails")
	}
}

// TestNoisedWindowIsTheDecodersPass checks the point of the doubled window: a fully masked
// noisy block is scored exactly as the decoder's denoise step over a cache of the clean
// blocks before it, and a clean block's last position exactly as its commit.
func TestNoisedWindowIsTheDecodersPass(t *testing.T) {
	m := tinyDiffusionModel(t)
	o := DefaultBlockDiffusion(m.Config.MaskTokenID)
	const l, blockSize = 16, 4
	x0 := make([]int32, l)
	for p := range x0 {
		x0[p] = int32((p*13 + 7) % 40)
	}
	ones, zeros := make([]float32, l), make([]float32, l)
	for p := range ones {
		ones[p] = 0.9999999 // t ≈ 1: the primary mask masks every maskable position
	}
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, l), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Float32, 1, l), shapes.Make(dtypes.Float32, 1, l)}
	p, err := modelcore.Of(m).Compile("noised_logits", inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		nw := o.buildNoised(in[0], nil, in[1], in[2], in[3])
		return []*Node{modelcore.Of(m).ForwardTraining(w, nw.win)}
	})
	require.NoError(t, err)
	out, err := p.Run(tensors.FromValue([][]int32{x0}), tensors.FromValue(int32(blockSize)), tensors.FromValue([][]float32{ones}), tensors.FromValue([][]float32{zeros}))
	require.NoError(t, err)
	logits := out[0].Value().([][][]float32)[0] // the primary (fully masked) copy's rows
	ints := func(x []int32) []int {
		out := make([]int, len(x))
		for i, v := range x {
			out[i] = int(v)
		}
		return out
	}
	mask := m.Config.MaskTokenID
	for blk := 1; blk < l/blockSize; blk++ {
		s, err := m.NewSession(l, blockSize)
		require.NoError(t, err)
		start := blk * blockSize
		_, err = s.Prefill(ints(x0[:start]))
		require.NoError(t, err)
		step, err := s.Step([]int{int(x0[start]), mask, mask, mask})
		require.NoError(t, err)
		s.Close()
		for j := range blockSize {
			requireClose(t, step[j], logits[start+j], "denoise step of block %d, row %d", blk, j)
		}
		commit, err := m.Logits(ints(x0[:start]), blockSize)
		require.NoError(t, err)
		row := l + (start-1)/4 // the clean row of position start-1
		requireClose(t, commit[start-1], logits[row], "commit of block %d", blk-1)
	}
}

func requireClose(t *testing.T, want, got []float32, msgAndArgs ...any) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		if d := math.Abs(float64(want[i] - got[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
			require.InDeltaf(t, want[i], got[i], 1e-4, "logit %d: %v", i, msgAndArgs)
		}
	}
}

// TestBlockDiffusionLossTerms checks the terms against hand-made cases: against itself as the
// base the KL vanishes (a block's last position sees what causal attention sees), and every
// term is a positive, finite mean.
func TestBlockDiffusionLossTerms(t *testing.T) {
	for _, firstMasks := range []bool{false, true} {
		t.Run(map[bool]string{false: "anchors", true: "first masks"}[firstMasks], func(t *testing.T) {
			testBlockDiffusionLossTerms(t, firstMasks)
		})
	}
}

// testBlockDiffusionLossTerms checks the terms; with firstMasks the KL also reads noisy rows,
// which see masks the causal base does not, so against itself it is not zero.
func testBlockDiffusionLossTerms(t *testing.T, firstMasks bool) {
	m := tinyDiffusionModel(t)
	o := DefaultBlockDiffusion(m.Config.MaskTokenID)
	o.KLAtFirstMasks = firstMasks
	const b, l = 2, 16
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, b, l), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Float32, b, l), shapes.Make(dtypes.Float32, b, l)}
	p, err := modelcore.Of(m).Compile("terms", inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		terms := o.Loss(modelcore.Of(m), w, w, in[0], nil, in[1], in[2], in[3], dtypes.Float32)
		return []*Node{terms.Loss, terms.Masked, terms.Anchor, terms.Guess, terms.KL, terms.MaskedFraction}
	})
	require.NoError(t, err)
	x0 := make([][]int32, b)
	rates, u := make([][]float32, b), make([][]float32, b)
	for i := range b {
		x0[i], rates[i], u[i] = make([]int32, l), make([]float32, l), make([]float32, l)
		for q := range l {
			x0[i][q] = int32((i*17 + q*7 + 1) % 40)
			rates[i][q], u[i][q] = 0.5, float32(q%3)/3
		}
	}
	out, err := p.Run(tensors.FromValue(x0), tensors.FromValue(int32(4)), tensors.FromValue(rates), tensors.FromValue(u))
	require.NoError(t, err)
	v := func(i int) float64 { return float64(out[i].Value().(float32)) }
	for i, name := range []string{"loss", "masked", "anchor", "guess"} {
		require.Greater(t, v(i), 0.5, name) // random weights: near ln(48) nats
		require.Less(t, v(i), 10.0, name)
	}
	if firstMasks {
		require.Positive(t, v(4), "KL against itself at rows that see masks") // TestKLAtFirstMasksMatchesHost checks its value
		require.Less(t, v(4), 10.0, "KL")
	} else {
		require.InDelta(t, 0, v(4), 1e-5, "KL against itself")
	}
	want := v(1) + o.AnchorWeight*v(2) + o.GuessWeight*v(3) + o.KLWeight*v(4)
	require.InDelta(t, want, v(0), 1e-5)
	require.InDelta(t, 0.5, v(5), 0.35, "masked fraction")
}

// TestKLAtFirstMasksMatchesHost checks the KL term with KLAtFirstMasks against a host
// computation from the model's noisy-window logits and a different base's causal logits: the
// mean over the anchors' clean rows and the noisy rows before a masked tail.
func TestKLAtFirstMasksMatchesHost(t *testing.T) {
	m := tinyDiffusionModel(t)
	b0, _, err := backend.New()
	require.NoError(t, err)
	baseModel, err := model.NewRandom(b0, tinyDiffusionConfig(), dtypes.Float32, 9)
	require.NoError(t, err)
	defer baseModel.Close()
	baseParams, err := modelcore.Of(baseModel).TrainableParams()
	require.NoError(t, err)
	o := DefaultBlockDiffusion(m.Config.MaskTokenID)
	o.KLAtFirstMasks = true
	const b, l, blockSize = 2, 16, 4
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, b, l), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Float32, b, l), shapes.Make(dtypes.Float32, b, l)}
	for _, p := range baseParams {
		inputs = append(inputs, p.Tensor.Shape())
	}
	p, err := modelcore.Of(m).Compile("kl", inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		base := modelcore.Of(m).BindWeights(in[4:])
		terms := o.Loss(modelcore.Of(m), w, base, in[0], nil, in[1], in[2], in[3], dtypes.Float32)
		nw := o.buildNoised(in[0], nil, in[1], in[2], in[3])
		return []*Node{terms.KL, modelcore.Of(m).ForwardTraining(w, nw.win), nw.anchor, nw.firstMasks}
	})
	require.NoError(t, err)
	x0 := make([][]int32, b)
	rates, u := make([][]float32, b), make([][]float32, b)
	for i := range b {
		x0[i], rates[i], u[i] = make([]int32, l), make([]float32, l), make([]float32, l)
		for q := range l {
			x0[i][q] = int32((i*19 + q*5 + 2) % 40)
			rates[i][q], u[i][q] = 0.6, float32((q*7+i)%5)/5
		}
	}
	ts := []*tensors.Tensor{tensors.FromValue(x0), tensors.FromValue(int32(blockSize)), tensors.FromValue(rates), tensors.FromValue(u)}
	for _, p := range baseParams {
		c, err := p.Tensor.LocalClone() // the base lives on a backend of its own
		require.NoError(t, err)
		ts = append(ts, c)
	}
	out, err := p.Run(ts...)
	require.NoError(t, err)
	logits := out[1].Value().([][][]float32)
	anchor, first := out[2].Value().([][]float32), out[3].Value().([][]float32)
	kl := func(pl, ql []float32) float64 { // KL(softmax(pl) ‖ softmax(ql))
		lse := func(x []float32) float64 {
			mx := math.Inf(-1)
			for _, v := range x {
				mx = math.Max(mx, float64(v))
			}
			s := 0.0
			for _, v := range x {
				s += math.Exp(float64(v) - mx)
			}
			return mx + math.Log(s)
		}
		lp, lq := lse(pl), lse(ql)
		s := 0.0
		for i := range pl {
			lpi := float64(pl[i]) - lp
			s += math.Exp(lpi) * (lpi - (float64(ql[i]) - lq))
		}
		return s
	}
	var sum, count float64
	for r := range 2 * b {
		toks := make([]int, l)
		for q := range l {
			toks[q] = int(x0[r%b][q])
		}
		baseLogits, err := baseModel.Logits(toks, 1)
		require.NoError(t, err)
		for q := range l {
			if first[r][q] == 1 {
				sum, count = sum+kl(baseLogits[q], logits[r][q]), count+1
			}
		}
		for k := range l / 4 {
			if anchor[r][l+k] == 1 {
				sum, count = sum+kl(baseLogits[4*k+3], logits[r][l+k]), count+1
			}
		}
	}
	require.Greater(t, count, float64(2*b*(l/4-1)), "rows before masked tails are scored beside the anchors")
	want := sum / count
	require.Greater(t, want, 1e-3, "a different base disagrees")
	require.InDelta(t, want, float64(out[0].Value().(float32)), 1e-5*(1+want))
}
