package diffusion

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

// fixtureModel loads the first fixture model, for tests that need a trained-looking
// checkpoint rather than a particular one.
func fixtureModel(t *testing.T) *model.Model {
	return fixtureModels(t)[0].load(t, testutil.Backend(t))
}

// prompts returns n prompts of lengths 1, 2, … (cycling up to 13) from the vocabulary.
func prompts(m *model.Model, n int) [][]int {
	out := make([][]int, n)
	for i := range out {
		p := make([]int, i%13+1)
		for j := range p {
			p[j] = 3 + (i*31+j*17)%(m.Config.VocabSize-4)
		}
		out[i] = p
	}
	return out
}

// modeConfigs are the decodings that the batch and tensor-parallel tests compare with
// one prompt on one device: each mode, greedy, and fused sampling, 17 new tokens.
func modeConfigs() map[string]Config {
	sampled := Quality
	sampled.Temperature, sampled.TopP, sampled.Seed = 0.8, 0.95, 11
	speedRef := Speed
	speedRef.Mode = Reference
	ar := Quality
	ar.Mode = Autoregressive
	out := map[string]Config{"quality": Quality, "speed-reference": speedRef, "autoregressive": ar, "sampled": sampled}
	for name, cfg := range out {
		cfg.MaxNewTokens = 17
		out[name] = cfg
	}
	return out
}

// A batch of prompts of lengths 1 to 13 gives exactly the single-prompt outputs, greedy
// and sampled, in every mode.
func TestBatchEqualsSingle(t *testing.T) {
	m := fixtureModel(t)
	ps := prompts(m, 13)
	for name, cfg := range modeConfigs() {
		t.Run(name, func(t *testing.T) {
			d, err := New(m, cfg)
			require.NoError(t, err)
			batch, err := d.GenerateBatch(context.Background(), ps)
			require.NoError(t, err)
			for i, p := range ps {
				single, err := d.Generate(context.Background(), p)
				require.NoError(t, err)
				require.Equal(t, single.Tokens, batch[i].Tokens, "prompt %d (length %d)", i, len(p))
				require.Equal(t, single.Finish, batch[i].Finish, "prompt %d", i)
				require.Equal(t, single.Stats.Forwards, batch[i].Stats.Forwards, "prompt %d", i)
			}
		})
	}
}

// Sampling with a fixed seed repeats itself; another seed differs; temperature 0 is
// greedy whatever the filters and seed.
func TestSampling(t *testing.T) {
	m := fixtureModel(t)
	prompt := []int{5, 9, 14}
	cfg := Quality
	cfg.MaxNewTokens = 24
	greedy := generate(t, m, cfg, prompt)

	cfg.Temperature, cfg.Seed = 1.5, 1
	first := generate(t, m, cfg, prompt)
	again := generate(t, m, cfg, prompt)
	require.Equal(t, first.Tokens, again.Tokens, "same seed")
	cfg.Seed = 2
	other := generate(t, m, cfg, prompt)
	require.NotEqual(t, first.Tokens, other.Tokens, "another seed")
	require.NotEqual(t, greedy.Tokens, first.Tokens, "sampling at temperature 1.5")

	cfg.Temperature, cfg.TopK, cfg.TopP, cfg.Seed = 0, 5, 0.5, 99
	require.Equal(t, greedy.Tokens, generate(t, m, cfg, prompt).Tokens, "temperature 0")

	// Top-k 1 leaves only the argmax, drawn with probability 1: every masked position
	// is revealed at once with its argmax, as greedy decoding with threshold 0 does.
	cfg.Temperature, cfg.TopK, cfg.TopP = 1.5, 1, 0
	topOne := generate(t, m, cfg, prompt)
	cfg.Temperature, cfg.TopK, cfg.Threshold = 0, 0, 0
	require.Equal(t, generate(t, m, cfg, prompt).Tokens, topOne.Tokens, "top-k 1")
}

// Streaming yields the result's tokens as they are read: the k-th chunk holds at most
// the blocks of the k-th read (1, 2, 4, ... up to BlocksPerReadback; on the Go
// backend, whose host runs each iteration, one block). Cancelling stops before the
// next read and leaves no goroutine behind.
func TestStreamAndCancel(t *testing.T) {
	m := fixtureModel(t)
	cfg := Quality
	cfg.MaxNewTokens = 40
	d, err := New(m, cfg)
	require.NoError(t, err)
	prompt := []int{7, 8}

	whole, err := d.Generate(context.Background(), prompt)
	require.NoError(t, err)
	var streamed []int
	var final *Result
	chunks := 0
	readBlocks := firstChunkBlocks(cfg.BlocksPerReadback, true) // the blocks of the next read
	for c, err := range d.Stream(context.Background(), prompt) {
		require.NoError(t, err)
		streamed = append(streamed, c.Tokens...)
		if c.Result != nil {
			final = c.Result
			continue
		}
		require.LessOrEqual(t, len(c.Tokens), readBlocks*cfg.BlockSize, "chunk %d is at most the %d blocks of its read", chunks, readBlocks)
		chunks, readBlocks = chunks+1, nextChunkBlocks(readBlocks, cfg.BlocksPerReadback)
	}
	require.Equal(t, whole.Tokens, streamed)
	require.NotNil(t, final)
	require.Equal(t, whole.Tokens, final.Tokens)
	reads := 0 // the fewest reads that cover the generation: after 1, 2, 4, ... blocks
	for blocks, next := 0, firstChunkBlocks(cfg.BlocksPerReadback, true); blocks*cfg.BlockSize < len(whole.Tokens); blocks, next = blocks+next, nextChunkBlocks(next, cfg.BlocksPerReadback) {
		reads++
	}
	require.Greater(t, reads, 3, "a generation long enough to ramp")
	require.GreaterOrEqual(t, chunks, reads)

	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int
	var streamErr error
	cancelledAt := 0
	for c, err := range d.Stream(ctx, prompt) {
		if err != nil {
			streamErr = err
			break
		}
		require.Zero(t, cancelledAt, "a chunk after the cancellation")
		got = append(got, c.Tokens...)
		if len(got) >= 8 {
			cancel()
			cancelledAt = len(got)
		}
	}
	require.ErrorIs(t, streamErr, context.Canceled)
	require.Equal(t, whole.Tokens[:len(got)], got)

	// Breaking out of the loop stops the generation too.
	for range d.Stream(context.Background(), prompt) {
		break
	}
	_, err = d.Generate(ctx, prompt)
	require.True(t, errors.Is(err, context.Canceled))
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
}
