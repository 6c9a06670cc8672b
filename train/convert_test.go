package train

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// wordDocs makes documents of words drawn at random from a small lexicon, so that within a
// word every byte after the first two follows from them: text that a block-diffusion
// model can write several bytes at a time, and an autoregressive one only byte by byte.
func wordDocs(seed uint64, docs, words int) [][]byte {
	lexicon := []string{"func ", "return ", "if err != nil ", "{\n", "}\n", "package ", "import ",
		"for i := range ", "switch ", "case ", "default:\n", "struct ", "interface ", "string", "error"}
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]byte, docs)
	for d := range out {
		for range words {
			out[d] = append(out[d], lexicon[rng.IntN(len(lexicon))]...)
		}
	}
	return out
}

// TestMicroConversion converts a micro autoregressive model into a block-diffusion one:
// fused decoding of held-out prompts then writes more than one token per forward, where
// the AR model stays near one, and the decoder's output is the decoding contract's, as
// a naive decoder that recomputes the whole sequence at every step gives it.
func TestMicroConversion(t *testing.T) {
	ctx := context.Background()
	data := byteTokens(wordDocs(1, 120, 60)...)
	held := wordDocs(2, 6, 40)
	m := microModel(t, microConfig(), 3)
	const seqLen = 64
	ar, err := New(m, data, Config{Batch: 16, SeqLen: seqLen, Schedule: Schedule{Peak: 2e-2, Min: 2e-3, Warmup: 20, Total: 200},
		Clip: 1, Seed: 1, BOS: byteBOS})
	require.NoError(t, err)
	_, err = ar.Run(ctx, RunOptions{})
	require.NoError(t, err)
	arDir := t.TempDir()
	require.NoError(t, ar.Save(arDir, SaveOptions{}))
	require.NoError(t, ar.Close())

	base, err := model.Load(modelcore.Of(m).Backend(), arDir, model.LoadOptions{})
	require.NoError(t, err)
	defer base.Close()
	o := DefaultBlockDiffusion(byteMask)
	conv, err := New(base, data, Config{Batch: 8, SeqLen: seqLen, Schedule: Schedule{Peak: 1e-2, Min: 1e-3, Warmup: 20, Total: 300},
		Clip: 1, Seed: 2, BOS: byteBOS, FrozenBase: true,
		Objective: o.Objective(Curriculum{LargeBlock: 8, LargeUntil: 100, Block: 4})})
	require.NoError(t, err)
	_, err = conv.Run(ctx, RunOptions{})
	require.NoError(t, err)
	convDir := t.TempDir()
	require.NoError(t, conv.Save(convDir, SaveOptions{}))
	require.NoError(t, conv.Close())
	converted, err := model.Load(modelcore.Of(m).Backend(), convDir, model.LoadOptions{})
	require.NoError(t, err)
	defer converted.Close()

	cfg := diffusion.Quality
	cfg.MaxNewTokens = 24
	var prompts [][]int
	for _, d := range held {
		p := []int{byteBOS}
		for _, c := range d[:13] { // prompts of 14 tokens: the first block holds the prompt's tail
			p = append(p, int(c))
		}
		prompts = append(prompts, p)
	}
	tokensPerForward := func(mm *model.Model) float64 {
		dec, err := diffusion.New(mm, cfg)
		require.NoError(t, err)
		var tokens, forwards int
		for _, p := range prompts {
			r, err := dec.Generate(ctx, p)
			require.NoError(t, err)
			tokens += r.Stats.Tokens
			forwards += r.Stats.Forwards - 1 // the prefill
		}
		return float64(tokens) / float64(forwards)
	}
	before, after := tokensPerForward(base), tokensPerForward(converted)
	t.Logf("tokens per forward, fused, threshold 0.9: AR base %.3f, converted %.3f", before, after)
	require.Greater(t, after, 1.2)
	require.Greater(t, after, before+0.15)

	for _, mode := range []diffusion.Mode{diffusion.Reference, diffusion.Fused} {
		c := cfg
		c.Mode = mode
		dec, err := diffusion.New(converted, c)
		require.NoError(t, err)
		for i, p := range prompts {
			r, err := dec.Generate(ctx, p)
			require.NoError(t, err)
			want, finish := naiveDecode(t, converted, p, c)
			require.Equal(t, want, r.Tokens, "%s, prompt %d", mode, i)
			require.Equal(t, finish, r.Finish, "%s, prompt %d", mode, i)
		}
	}
}

// naiveDecode is the decoding contract's reference mode (docs/decoding.md), greedy,
// recomputing the whole sequence with block-causal attention at every step.
func naiveDecode(t *testing.T, m *model.Model, prompt []int, cfg diffusion.Config) ([]int, diffusion.Finish) {
	t.Helper()
	B, mask := cfg.BlockSize, m.Config.MaskTokenID
	stops := append(slices.Clone(m.Config.EOSTokenIDs), cfg.StopTokens...)
	argmax := func(row []float32) (int, float64) {
		best, top := -1, float32(math.Inf(-1))
		for id, v := range row {
			if id != mask && v > top {
				best, top = id, v
			}
		}
		var sum float64
		for id, v := range row {
			if id != mask {
				sum += math.Exp(float64(v - top))
			}
		}
		return best, 1 / sum
	}
	logits := func(seq []int) [][]float32 {
		l, err := m.Logits(seq, B)
		require.NoError(t, err)
		return l
	}
	P := len(prompt)
	seq := slices.Clone(prompt[:P/B*B])
	block := slices.Clone(prompt[P/B*B:])
	if len(block) == 0 {
		a, _ := argmax(logits(seq)[P-1])
		block = []int{a}
	}
	for len(block) < B {
		block = append(block, mask)
	}
	finish := func(all []int) ([]int, diffusion.Finish) {
		gen := all[P:]
		for i, id := range gen {
			if slices.Contains(stops, id) && i < cfg.MaxNewTokens {
				return gen[:i], diffusion.FinishStop
			}
		}
		return gen[:min(len(gen), cfg.MaxNewTokens)], diffusion.FinishLength
	}
	for steps := 0; steps < 10000; steps++ {
		start := len(seq)
		full := append(slices.Clone(seq), block...)
		if slices.Contains(block, mask) {
			l := logits(full)
			type cand struct {
				pos, id int
				conf    float64
			}
			var masked []cand
			for j, id := range block {
				if id == mask {
					c, conf := argmax(l[start+j-1])
					masked = append(masked, cand{start + j, c, conf})
				}
			}
			var reveal []cand
			for _, c := range masked {
				if c.conf > cfg.Threshold {
					reveal = append(reveal, c)
				}
			}
			if len(reveal) < cfg.MinReveal {
				slices.SortStableFunc(masked, func(a, b cand) int {
					if a.conf != b.conf {
						if a.conf > b.conf {
							return -1
						}
						return 1
					}
					return a.pos - b.pos
				})
				reveal = masked[:min(cfg.MinReveal, len(masked))]
			}
			for _, c := range reveal {
				block[c.pos-start] = c.id
			}
			full = append(slices.Clone(seq), block...)
			for q := P; q < len(full); q++ { // early stop
				if full[q] == mask {
					break
				}
				if slices.Contains(stops, full[q]) {
					return finish(full)
				}
			}
			continue
		}
		if len(full)-P >= cfg.MaxNewTokens {
			return finish(full)
		}
		a, _ := argmax(logits(full)[len(full)-1])
		seq, block = full, []int{a}
		for len(block) < B {
			block = append(block, mask)
		}
	}
	t.Fatal("naive decoding did not end")
	return nil, ""
}
