package quant

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// LayerNames names the layers as Model.Linears does.
func TestLayerNames(t *testing.T) {
	m, err := model.NewRandom(testBackend(t), tinyConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	defer m.Close()
	var names []string
	for _, nl := range modelcore.Of(m).Linears() {
		names = append(names, nl.Name)
	}
	assert.Equal(t, names, LayerNames(m.Config))
}

// Calibration covers every linear layer, is deterministic, takes running maxima, and
// survives a write and read; the progress bar is drawn when asked for.
func TestCalibrate(t *testing.T) {
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m := loadDense(t, dir)
			seqs, err := RandomSequences(6, 20, m.Config.VocabSize, 9)
			require.NoError(t, err)
			seqs = append(seqs, seqs[0][:7]) // A second length.
			var progress bytes.Buffer
			cal, err := Calibrate(m, seqs, CalibrateOptions{Progress: &progress})
			require.NoError(t, err)
			assert.Contains(t, progress.String(), "7/7")
			assert.Equal(t, LayerNames(m.Config), sortedAsForward(cal.LayerNames(), LayerNames(m.Config)))
			assert.Equal(t, 7, cal.Sequences)
			assert.Equal(t, 6*20+7, cal.Tokens)
			assert.Equal(t, DefaultCalibrationBlockSize, cal.BlockSize)
			require.NoError(t, cal.Check(m.Config, true))
			for name, stats := range cal.Layers {
				assert.Positive(t, stats.InputAmax, name)
			}

			again, err := Calibrate(m, seqs, CalibrateOptions{})
			require.NoError(t, err)
			assert.Equal(t, cal, again)
			first, err := Calibrate(m, seqs[:1], CalibrateOptions{})
			require.NoError(t, err)
			for name, stats := range first.Layers {
				assert.LessOrEqual(t, stats.InputAmax, cal.Layers[name].InputAmax, name)
			}
			causal, err := Calibrate(m, seqs, CalibrateOptions{BlockSize: 1})
			require.NoError(t, err)
			assert.Equal(t, 1, causal.BlockSize)

			path := filepath.Join(t.TempDir(), "calibration.json")
			require.NoError(t, cal.WriteFile(path))
			read, err := ReadCalibration(path)
			require.NoError(t, err)
			assert.Equal(t, cal, read)
			s, err := read.InputScale("lm_head")
			require.NoError(t, err)
			assert.Equal(t, float32(cal.Layers["lm_head"].InputAmax)/448, s)
		})
	}
}

// sortedAsForward orders names as the forward order lists them (unknown names last).
func sortedAsForward(names, order []string) []string {
	var out []string
	for _, n := range order {
		for _, m := range names {
			if m == n {
				out = append(out, n)
			}
		}
	}
	return out
}

func TestCalibrateErrors(t *testing.T) {
	m, err := model.NewRandom(testBackend(t), tinyConfig(), dtypes.Float32, 1)
	require.NoError(t, err)
	defer m.Close()
	for _, tc := range []struct {
		seqs [][]int
		opts CalibrateOptions
		want string
	}{
		{nil, CalibrateOptions{}, "at least one token sequence"},
		{[][]int{{1, 2}, {}}, CalibrateOptions{}, "sequence 1: no tokens"},
		{[][]int{{1, 48}}, CalibrateOptions{}, "token 48 at index 1 is outside the vocabulary of 48"},
		{[][]int{make([]int, 129)}, CalibrateOptions{}, "exceed max_position_embeddings"},
		{[][]int{{1}}, CalibrateOptions{BlockSize: -1}, "block size must be at least 1"},
	} {
		_, err := Calibrate(m, tc.seqs, tc.opts)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	one := write("one.json", "[1, 2, 3]")
	many := write("many.json", "[[4, 5], [6]]")
	text := write("text.txt", "7 8\n9\t10 ")
	seqs, err := ReadTokenFiles(one, many, text)
	require.NoError(t, err)
	assert.Equal(t, [][]int{{1, 2, 3}, {4, 5}, {6}, {7, 8, 9, 10}}, seqs)
	chunks, err := ChunkSequences(seqs, 2)
	require.NoError(t, err)
	assert.Equal(t, [][]int{{1, 2}, {3}, {4, 5}, {6}, {7, 8}, {9, 10}}, chunks)

	for _, tc := range []struct{ name, content, want string }{
		{"bad.json", `{"ids": [1]}`, "want a JSON array"},
		{"empty.json", `[]`, "sequence 0 is empty"},
		{"nested-empty.json", `[[1], []]`, "sequence 1 is empty"},
		{"bad.txt", "1 two 3", `token 1: "two" is not an integer id`},
		{"empty.txt", " \n", "sequence 0 is empty"},
	} {
		_, err := ReadTokenFiles(write(tc.name, tc.content))
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	_, err = ReadTokenFiles()
	require.ErrorContains(t, err, "no token files")
	_, err = ReadTokenFiles(filepath.Join(dir, "absent.txt"))
	require.ErrorContains(t, err, "reading tokens")
}

func TestRandomSequences(t *testing.T) {
	a, err := RandomSequences(3, 50, 10, 42)
	require.NoError(t, err)
	b, err := RandomSequences(3, 50, 10, 42)
	require.NoError(t, err)
	c, err := RandomSequences(3, 50, 10, 43)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
	seen := map[int]bool{}
	for _, seq := range a {
		require.Len(t, seq, 50)
		for _, id := range seq {
			require.True(t, id >= 0 && id < 10)
			seen[id] = true
		}
	}
	assert.Len(t, seen, 10)
}

// An FP8 model (W8A8, head included) decodes with the diffusion decoder, whose passes
// run inside device-side While loops, in every mode.
func TestQuantizedDiffusion(t *testing.T) {
	m, err := model.NewRandom(testBackend(t), tinyConfig(), dtypes.Float32, 3)
	require.NoError(t, err)
	defer m.Close()
	seqs, err := RandomSequences(4, 16, m.Config.VocabSize, 1)
	require.NoError(t, err)
	cal, err := Calibrate(m, seqs, CalibrateOptions{})
	require.NoError(t, err)
	// Calibrate compiled programs that read the dense weights; they were freed with
	// their graphs, and the model's own program cache is still empty.
	require.NoError(t, QuantizeModel(m, Options{Calibration: cal, QuantizeHead: true}))
	for _, mode := range []diffusion.Mode{diffusion.Reference, diffusion.Fused, diffusion.Autoregressive} {
		cfg := diffusion.Quality
		cfg.Mode = mode
		cfg.MaxNewTokens = 12
		d, err := diffusion.New(m, cfg)
		require.NoError(t, err)
		res, err := d.Generate(context.Background(), []int{5, 6, 7})
		require.NoError(t, err, "%s", mode)
		assert.NotEmpty(t, res.Tokens, "%s", mode)
	}
}

// FP8 layers work inside a device-side While loop (as examples/bench and the diffusion
// decoder on accelerators run them): the loop's functions read no node of another
// function, and, on backends that run loops on the device, the loop gives what the same
// steps give one program run each. (The Go backend, where the decoder never uses While,
// fails to execute this loop even for a dense model: "input 0 for node Where not
// computed yet".)
func TestQuantizedWhileLoop(t *testing.T) {
	m, err := model.NewRandom(testBackend(t), tinyConfig(), dtypes.Float32, 4)
	require.NoError(t, err)
	defer m.Close()
	seqs, err := RandomSequences(2, 8, m.Config.VocabSize, 1)
	require.NoError(t, err)
	cal, err := Calibrate(m, seqs, CalibrateOptions{})
	require.NoError(t, err)
	require.NoError(t, QuantizeModel(m, Options{Calibration: cal, QuantizeHead: true}))

	const steps = 3
	tokens := shapes.Make(dtypes.Int32, 1, 4)
	step := func(w *modelcore.Weights, tok *graph.Node) *graph.Node {
		g := tok.Graph()
		win := modelcore.Window{Tokens: tok, Start: graph.Const(g, []int32{0}), BlockSize: 4}
		logits, _ := modelcore.Of(m).Forward(w, win, nil, nil)
		return graph.ConvertDType(graph.ArgMax(logits, -1), dtypes.Int32)
	}
	loop, err := modelcore.Of(m).Compile("fp8_while", []shapes.Shape{tokens}, func(w *modelcore.Weights, in []*graph.Node) []*graph.Node {
		init := []*graph.Node{graph.Const(in[0].Graph(), int32(0)), in[0]}
		cond := func(_ *modelcore.Weights, st, _ []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.LessThan(st[0], graph.Const(st[0].Graph(), int32(steps)))}
		}
		body := func(w *modelcore.Weights, st, _ []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Add(st[0], graph.Const(st[0].Graph(), int32(1))), step(w, st[1])}
		}
		return []*graph.Node{w.While(init, nil, cond, body)[1]}
	})
	require.NoError(t, err)
	defer loop.Graph().Finalize()
	closures := 0
	for _, n := range loop.Graph().Nodes() {
		if !n.Function().IsMain() {
			closures++
		}
		for _, in := range n.Inputs() {
			require.Same(t, n.Function(), in.Function(), "node %s reads %s from another function", n, in)
		}
	}
	require.Positive(t, closures)
	if !backend.RunsLoopsOnDevice(modelcore.Of(m).Backend()) {
		t.Skipf("backend %s does not run decoding loops on the device", modelcore.Of(m).Backend().Name())
	}

	single, err := modelcore.Of(m).Compile("fp8_step", []shapes.Shape{tokens}, func(w *modelcore.Weights, in []*graph.Node) []*graph.Node {
		return []*graph.Node{step(w, in[0])}
	})
	require.NoError(t, err)
	defer single.Graph().Finalize()
	start := tensors.FromFlatDataAndDimensions([]int32{3, 9, 27, 17}, 1, 4)
	out, err := loop.Run(start)
	require.NoError(t, err)
	want := start
	for range steps {
		next, err := single.Run(want)
		require.NoError(t, err)
		want = next[0]
	}
	assert.Equal(t, tensors.MustCopyFlatData[int32](want), tensors.MustCopyFlatData[int32](out[0]))
}
