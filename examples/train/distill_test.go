package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/train"
)

// microCorpus is documents of BOS (1), ten tokens and EOS (2) over a vocabulary of 40.
func microCorpus() *train.Tokens {
	data := &train.Tokens{Vocab: 40}
	for i := range 60 {
		data.IDs = append(data.IDs, 1)
		for j := range 10 {
			data.IDs = append(data.IDs, uint16(4+(i+j)%30))
		}
		data.IDs = append(data.IDs, 2)
	}
	return data
}

// Contexts are BOS and then a run of one document's tokens, as the data holds them.
func TestDistillContexts(t *testing.T) {
	data := microCorpus()
	opts := distillOptions{Context: 8, MinContext: 3, Seed: 7}
	cs, err := distillContexts(data, 1, 2, 50, opts)
	require.NoError(t, err)
	require.Len(t, cs, 50)
	stream := make([]int, len(data.IDs))
	for i, id := range data.IDs {
		stream[i] = int(id)
	}
	for _, c := range cs {
		require.Equal(t, 1, c[0])
		body := c[1:]
		assert.GreaterOrEqual(t, len(body), 3)
		assert.LessOrEqual(t, len(body), 8)
		assert.NotContains(t, body, 1)
		assert.NotContains(t, body, 2)
		found := false
		for i := range len(stream) - len(body) + 1 {
			if slices.Equal(stream[i:i+len(body)], body) {
				found = true
				break
			}
		}
		assert.True(t, found, "context %v is not a run of the data", body)
	}
	again, err := distillContexts(data, 1, 2, 50, opts)
	require.NoError(t, err)
	assert.Equal(t, cs, again, "the draw depends on the seed alone")

	_, err = distillContexts(data, 1, 2, 5, distillOptions{Context: 8, MinContext: 9})
	require.ErrorContains(t, err, "draws gave 0 contexts")
}

// Each record is its context followed by the base's own greedy continuation of it.
func TestDistill(t *testing.T) {
	dir := t.TempDir()
	data := microCorpus()
	ids := filepath.Join(dir, "train.ids")
	require.NoError(t, os.WriteFile(ids, data.Bytes(), 0o644))
	f := flags{stage: "ar", trainPath: ids, hidden: 16, layers: 1, heads: 2, kv: 1, ffn: 32, maxPos: 64, ropeTheta: 10000,
		bos: -1, eos: -1, seq: 16, batch: 4, steps: 20, lr: 1e-2, minLR: 1e-3, warmup: 2, clip: 1, seed: 1, logEvery: 10,
		ckpt: filepath.Join(dir, "ar"), quiet: true}
	var out bytes.Buffer
	require.NoError(t, run(f, time.Now(), &out))

	b, _, err := backend.New()
	require.NoError(t, err)
	base, err := model.Load(b, f.ckpt, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer base.Close()
	opts := distillOptions{Records: 6, Context: 6, MinContext: 6, NewTokens: 9, Batch: 4, Seed: 3} // MinContext as the stage sets it
	d, err := distill(context.Background(), base, data, opts)
	require.NoError(t, err)
	contexts, err := distillContexts(data, 1, 2, opts.Records, opts)
	require.NoError(t, err)
	dc := diffusion.DefaultConfig()
	dc.Mode, dc.MaxNewTokens = diffusion.Autoregressive, opts.NewTokens
	dec, err := diffusion.New(base, dc)
	require.NoError(t, err)
	var want []uint16
	for _, c := range contexts {
		r, err := dec.Generate(context.Background(), c)
		require.NoError(t, err)
		for _, id := range append(slices.Clone(c), r.Tokens...) {
			want = append(want, uint16(id))
		}
		if r.Finish == diffusion.FinishStop {
			want = append(want, 2)
		}
	}
	assert.Equal(t, want, d.IDs)
	assert.Equal(t, 40, d.Vocab)

	// The stage writes the same records to -out.
	path := filepath.Join(dir, "distill.ids")
	out.Reset()
	require.NoError(t, run(flags{stage: "distill", baseDir: f.ckpt, trainPath: ids, outDir: path, records: 6, context: 6,
		maxNew: 9, batch: 4, seed: 3, dtype: "float32"}, time.Now(), &out))
	got, err := train.ReadTokens(path)
	require.NoError(t, err)
	assert.Equal(t, want, got.IDs)
	require.ErrorContains(t, run(flags{stage: "distill"}, time.Now(), &out), "needs -base, -train and -out")
}
