package train

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// ngramLoss is the cross-entropy in nats per scored target of held-out tokens under an
// n-gram model of the training tokens with ctx tokens of context, interpolated with the
// add-one unigram by the weight (of a grid) that does best on the held-out tokens
// itself: a baseline that a model using ctx tokens of context must beat.
func ngramLoss(train, heldOut *Tokens, ctx int) float64 {
	key := func(ids []uint16, i int) string { return string(rune(ctx)) + string(toRunes(ids[max(0, i-ctx):i])) }
	counts, contexts := map[string]float64{}, map[string]float64{}
	unigram := make([]float64, train.Vocab)
	for i, id := range train.IDs {
		unigram[id]++
		if i >= ctx {
			k := key(train.IDs, i)
			counts[k+string(rune(id))]++
			contexts[k]++
		}
	}
	best := math.Inf(1)
	for _, lambda := range []float64{0, 0.5, 0.6, 0.7, 0.8, 0.9} {
		var nats float64
		n := 0
		for i := 1; i < len(heldOut.IDs); i++ {
			id := heldOut.IDs[i]
			if id == byteBOS {
				continue
			}
			p := (1 - lambda) * (unigram[id] + 1) / float64(len(train.IDs)+train.Vocab)
			if k := key(heldOut.IDs, i); contexts[k] > 0 {
				p += lambda * counts[k+string(rune(id))] / contexts[k]
			}
			nats -= math.Log(p)
			n++
		}
		best = min(best, nats/float64(n))
	}
	return best
}

func toRunes(ids []uint16) []rune {
	out := make([]rune, len(ids))
	for i, id := range ids {
		out[i] = rune(id)
	}
	return out
}

// The micro model trained on Go source learns to use context: its held-out loss falls
// below what a bigram model of the same data reaches (2.59 nats per byte, against 3.48
// for the unigram), which a trainer whose attention, gradients, optimizer or schedule
// were broken would not reach. It reached 1.97-2.28 over model and data seeds 1-4 (the
// Go backend's results differ slightly between builds and GOMAXPROCS, and training
// amplifies that).
func TestTrainMicroModel(t *testing.T) {
	code, held := goSources(t, "strings", "reader.go", "iter.go")
	train := byteTokens(code...)
	heldOut := byteTokens(held...)
	var bytes int64
	for _, d := range held {
		bytes += int64(len(d))
	}
	unigram, bigram := ngramLoss(train, heldOut, 0), ngramLoss(train, heldOut, 1)
	m := microModel(t, microConfig(), 1)
	const steps = 500
	tr, err := New(m, train, Config{Batch: 16, SeqLen: 64, Schedule: Schedule{Peak: 2e-2, Min: 2e-3, Warmup: 20, Total: steps},
		Clip: 1, Seed: 1, BOS: byteBOS})
	require.NoError(t, err)
	defer tr.Close()
	before, err := tr.Evaluate(context.Background(), heldOut, bytes, 0)
	require.NoError(t, err)
	rep, err := tr.Run(context.Background(), RunOptions{LogEvery: 100, Eval: heldOut, EvalBytes: bytes})
	require.NoError(t, err)
	require.Equal(t, "done", rep.Stopped)
	require.Equal(t, steps, rep.Steps)
	after := *rep.Eval
	t.Logf("held-out: unigram %.3f, bigram %.3f nats/byte; before %s; after %s; %.0f tokens/s", unigram, bigram, before, after, rep.TokensPerSecond)
	require.InDelta(t, math.Log(byteVocab), before.Loss, 0.1, "untrained: near uniform")
	require.Less(t, after.Loss, bigram-0.15)
	require.InDelta(t, after.Nats/math.Ln2/float64(bytes), after.BitsPerByte, 1e-9)
}
