package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

// The command calibrates the tiny random model on random tokens and on token files,
// and its saved checkpoint loads back as FP8.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	f := flags{sequences: 3, length: 16, seed: 2, block: 4, out: filepath.Join(dir, "calibration.json"),
		save: filepath.Join(dir, "fp8"), strategy: "tensor", quiet: true}
	var out bytes.Buffer
	require.NoError(t, run(f, nil, &out))
	assert.Contains(t, out.String(), "TINY RANDOM model")
	assert.Contains(t, out.String(), "calibrated on 3 sequences (48 tokens, random tokens, seed 2)")
	cal, err := quant.ReadCalibration(f.out)
	require.NoError(t, err)
	assert.Len(t, cal.Layers, 9)

	b, _, err := backend.New()
	require.NoError(t, err)
	m, err := quant.Load(b, f.save, quant.Options{}, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer m.Close()
	_, ok := modelcore.Of(m).Layers[0].QKV.(*quant.FP8Linear)
	assert.True(t, ok)

	tokens := filepath.Join(dir, "tokens.txt")
	require.NoError(t, os.WriteFile(tokens, []byte("1 2 3 4 5 6 7 8 9 10"), 0o644))
	f.save, f.length = "", 4
	out.Reset()
	require.NoError(t, run(f, []string{tokens}, &out))
	assert.Contains(t, out.String(), "calibrated on 3 sequences (10 tokens, 1 token files)")

	f.length = 10_000
	require.ErrorContains(t, run(f, nil, &out), "-length 10000 must be in [1, 512]")
}

// Flags out of range are errors naming the flag, before anything is loaded.
func TestFlagRanges(t *testing.T) {
	good := flags{sequences: 3, length: 16, seed: 2, block: 4, out: "calibration.json", strategy: "channel"}
	require.NoError(t, good.check())
	for _, c := range []struct {
		edit func(*flags)
		want string
	}{
		{func(f *flags) { f.sequences = -1 }, "-sequences -1"},
		{func(f *flags) { f.sequences = 0 }, "-sequences 0"},
		{func(f *flags) { f.length = -16 }, "-length -16"},
		{func(f *flags) { f.block = 0 }, "-block 0"},
		{func(f *flags) { f.block = -4 }, "-block -4"},
		{func(f *flags) { f.strategy = "row" }, `-strategy "row"`},
		{func(f *flags) { f.out = "" }, "-out"},
	} {
		f := good
		c.edit(&f)
		require.ErrorContains(t, run(f, nil, &bytes.Buffer{}), c.want)
	}
}
