package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/model"
)

// The ar stage trains a tiny model on an ids file into a checkpoint that model.Load
// opens, resumes from it, and the eval stage evaluates it.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	data := microCorpus()
	ids := filepath.Join(dir, "train.ids")
	require.NoError(t, os.WriteFile(ids, data.Bytes(), 0o644))
	f := flags{stage: "ar", trainPath: ids, heldOutPath: ids, heldOutBytes: 600, hidden: 16, layers: 1, heads: 2, kv: 1,
		ffn: 32, maxPos: 64, ropeTheta: 10000, bos: -1, eos: -1, seq: 16, batch: 4, steps: 6, lr: 1e-2, minLR: 1e-3, warmup: 2,
		clip: 1, seed: 1, logEvery: 3, ckpt: filepath.Join(dir, "ckpt"), quiet: true}
	var out bytes.Buffer
	require.NoError(t, run(f, time.Now(), &out))
	assert.Contains(t, out.String(), "done at step 6")
	assert.Contains(t, out.String(), "held-out bits/byte")

	b, _, err := backend.New()
	require.NoError(t, err)
	m, err := model.Load(b, f.ckpt, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, 40, m.Config.VocabSize)
	assert.Equal(t, 39, m.Config.MaskTokenID)
	assert.Equal(t, 1, m.Config.BOSTokenID)
	assert.Equal(t, []int{2}, m.Config.EOSTokenIDs)

	f.steps, f.resume = 8, true
	out.Reset()
	require.NoError(t, run(f, time.Now(), &out))
	assert.Contains(t, out.String(), "done at step 8")
	assert.Regexp(t, `tokens this run\s+128\n`, out.String()) // two steps of 4×16

	out.Reset()
	require.NoError(t, run(flags{stage: "eval", modelDir: f.ckpt, heldOutPath: ids, heldOutBytes: 600, seq: 16, batch: 4}, time.Now(), &out))
	assert.Contains(t, out.String(), "bits/byte")

	require.ErrorContains(t, run(flags{stage: "nope"}, time.Now(), &out), "want ar, eval, convert, select, calibrate or distill")

	many := f
	many.devices, many.batch, many.resume = 64, 64, false
	require.ErrorContains(t, run(many, time.Now(), &out), "64 devices asked for")
}
