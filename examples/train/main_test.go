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
	"github.com/blockdiff/blockdiff/quant"
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

	// The calibrate stage writes W8A8 by default and weights only with -fp8-activations none.
	for _, acts := range []string{"static", "none"} {
		fp8 := filepath.Join(dir, "fp8-"+acts)
		out.Reset()
		require.NoError(t, run(flags{stage: "calibrate", modelDir: f.ckpt, calibPath: ids, outDir: fp8, fp8Activations: acts,
			heldOutPath: ids, seq: 16, block: 4, calibSeqs: 4, evalBatches: 2}, time.Now(), &out))
		assert.Contains(t, out.String(), "FP8 W8A8, static input scales")
		assert.Equal(t, acts == "none", bytes.Contains(out.Bytes(), []byte("FP8 weight-only")))
		config, err := os.ReadFile(filepath.Join(fp8, "config.json"))
		require.NoError(t, err)
		assert.Equal(t, acts == "none", bytes.Contains(config, []byte(`"input_activations": null`)), "%s", config)
		q, err := quant.Load(b, fp8, quant.Options{}, model.LoadOptions{DType: dtypes.Float32})
		require.NoError(t, err)
		q.Close()
	}
	require.ErrorContains(t, run(flags{stage: "calibrate", modelDir: f.ckpt, calibPath: ids, outDir: dir, fp8Activations: "dynamic"},
		time.Now(), &out), `-fp8-activations "dynamic": want static or none`)

	require.ErrorContains(t, run(flags{stage: "nope"}, time.Now(), &out), "want ar, eval, convert, select, calibrate or distill")

	many := f
	many.devices, many.batch, many.resume = 64, 64, false
	require.ErrorContains(t, run(many, time.Now(), &out), "64 devices asked for")
}
