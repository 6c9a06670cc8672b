package train

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// smallData is a few short documents of bytes.
func smallData() *Tokens {
	var docs [][]byte
	for i := range 12 {
		docs = append(docs, []byte("func f"+string(rune('a'+i))+"(x int) int { return x * "+string(rune('0'+i%10))+" }\n"))
	}
	return byteTokens(docs...)
}

// smallConfig is a trainer configuration for short tests.
func smallConfig() Config {
	return Config{Batch: 4, SeqLen: 32, Schedule: Schedule{Peak: 1e-2, Min: 1e-3, Warmup: 2, Total: 6}, Clip: 1, Seed: 3, BOS: byteBOS}
}

// The gradient of the whole training loss (NextToken over rows with two documents and
// pads) with respect to the master weights matches central finite differences.
func TestLossGradientMatchesFiniteDifferences(t *testing.T) {
	b := testutil.Backend(t)
	m := microModel(t, microConfig(), 2)
	params, err := modelcore.Of(m).TrainableParams()
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(4, 5))
	values := make([][]float32, len(params))
	for i, p := range params {
		values[i] = tensors.MustCopyFlatData[float32](p.Tensor)
		for j := range values[i] {
			values[i][j] += float32(rng.NormFloat64() * 0.2) // away from init: norms not all one
		}
	}
	rows := newRows(2, 13)
	rows.setRow(0, byteTokens([]byte("abc"), []byte("func x()")).IDs, byteBOS)
	rows.setRow(1, byteTokens([]byte("if err != nil {")).IDs[3:], byteBOS)
	rows.setRow(1, byteTokens([]byte("x := 1")).IDs[:8], byteBOS) // pads after
	names, shapesOf := make([]string, len(params)), make([]shapes.Shape, len(params))
	for i, p := range params {
		names[i], shapesOf[i] = p.Name, p.Tensor.Shape()
	}
	// eps 4e-2: after Richardson, the loss's float32 rounding (its ulp, 5e-7, over eps)
	// stays near 2e-5.
	testutil.GradientCheck{Names: names, Shapes: shapesOf, Eps: 4e-2, RelTol: 2e-3, AbsTol: 5e-5,
		Loss: func(g *Graph, nodes []*Node) *Node {
			c := func(x []int32) *Node { return Reshape(Const(g, x), rows.Rows, rows.Width) }
			in := &Inputs{Model: modelcore.Of(m), Weights: modelcore.Of(m).BindWeights(nodes), DType: dtypes.Float32,
				Tokens: c(rows.Tokens), Segments: c(rows.Segments), Positions: c(rows.Positions), BOS: byteBOS}
			return NextToken(in).Value
		}}.Run(t, b, values, rng)
}

// masterValues copies the trainer's master weights and moments to the host.
func masterValues(t *testing.T, tr *Trainer) [][]float32 {
	var out [][]float32
	for _, list := range [][]*tensors.Tensor{tr.masters, tr.moment1, tr.moment2} {
		for _, x := range list {
			out = append(out, tensors.MustCopyFlatData[float32](x))
		}
	}
	return out
}

// droppedTargets is NextToken scoring a random 70 % of the targets: an objective that
// draws from the step's random state.
func droppedTargets(in *Inputs) Loss {
	s := in.Tokens.Shape().Dimensions[1] - 1
	tokens, targets := SliceAxis(in.Tokens, 1, AxisRange(0, s)), SliceAxis(in.Tokens, 1, AxisRange(1, s+1))
	segments := SliceAxis(in.Segments, 1, AxisRange(0, s))
	logits := in.Forward(modelcore.TrainingWindow{Tokens: MaxScalar(tokens, 0), Positions: SliceAxis(in.Positions, 1, AxisRange(0, s)),
		Visible: DocumentCausal(segments)})
	keep := LessThan(in.Uniform(targets.Shape().Dimensions...), Const(targets.Graph(), float32(0.7)))
	scored := LogicalAnd(keep, LogicalAnd(GreaterOrEqual(targets, ScalarZero(targets.Graph(), dtypes.Int32)),
		Equal(SliceAxis(in.Segments, 1, AxisRange(1, s+1)), segments)))
	return MeanCrossEntropy(logits, targets, scored)
}

// Training N steps, checkpointing (in files of at most 20 kB), and resuming for N more
// ends where 2N steps in one go end, with the autoregressive objective and with one that
// draws random numbers.
func TestResumeEqualsStraightRun(t *testing.T) {
	for name, objective := range map[string]Objective{"next-token": NextToken, "random": droppedTargets} {
		t.Run(name, func(t *testing.T) { testResume(t, objective) })
	}
}

func testResume(t *testing.T, objective Objective) {
	data := smallData()
	cfg := smallConfig()
	cfg.Objective = objective
	ctx := context.Background()
	m := microModel(t, microConfig(), 4)
	straight, err := New(m, data, cfg)
	require.NoError(t, err)
	defer straight.Close()
	_, err = straight.Run(ctx, RunOptions{Steps: 6})
	require.NoError(t, err)

	dir := filepath.Join(t.TempDir(), "ckpt")
	const shard = 20_000
	first, err := New(m, data, cfg)
	require.NoError(t, err)
	rep, err := first.Run(ctx, RunOptions{Steps: 3, CheckpointDir: dir, Save: SaveOptions{MaxShardBytes: shard}})
	require.NoError(t, err)
	require.Equal(t, 3, rep.Steps)
	require.NoError(t, first.Close())
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.safetensors"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	require.NoError(t, err)
	require.Greater(t, len(files), 1, "the optimizer state is sharded")
	for _, f := range append(files, more...) {
		info, err := os.Stat(f)
		require.NoError(t, err)
		require.LessOrEqual(t, info.Size(), int64(shard), f)
	}

	resumed, err := New(m, data, cfg)
	require.NoError(t, err)
	defer resumed.Close()
	require.NoError(t, resumed.Restore(dir))
	require.Equal(t, 3, resumed.Steps())
	_, err = resumed.Run(ctx, RunOptions{Steps: 6})
	require.NoError(t, err)
	require.Equal(t, straight.sampler.State(), resumed.sampler.State())
	want, got := masterValues(t, straight), masterValues(t, resumed)
	for i := range want {
		require.InDeltaSlice(t, want[i], got[i], 1e-7, "tensor %d", i)
	}
	t.Logf("bitwise equal: %v", func() bool {
		for i := range want {
			for j := range want[i] {
				if want[i][j] != got[i][j] {
					return false
				}
			}
		}
		return true
	}())

	other := microConfig()
	other.NumLayers = 1
	wrong, err := New(microModel(t, other, 1), data, cfg)
	require.NoError(t, err)
	defer wrong.Close()
	require.ErrorContains(t, wrong.Restore(dir), "another model configuration")
}

// A checkpoint loads with model.Load; in float32 its logits are the training forward's
// bit for bit, and the default bfloat16 weights are the masters rounded.
func TestCheckpointLoads(t *testing.T) {
	b := testutil.Backend(t)
	data := smallData()
	m := microModel(t, microConfig(), 5)
	tr, err := New(m, data, smallConfig())
	require.NoError(t, err)
	defer tr.Close()
	for range 2 {
		require.NoError(t, tr.Step())
	}
	dir32, dir16 := filepath.Join(t.TempDir(), "f32"), filepath.Join(t.TempDir(), "bf16")
	require.NoError(t, tr.Save(dir32, SaveOptions{DType: dtypes.Float32}))
	require.NoError(t, tr.Save(dir16, SaveOptions{}))

	loaded, err := model.Load(b, dir32, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer loaded.Close()
	require.Equal(t, m.Config, loaded.Config)
	tokens := []int{byteBOS, 'f', 'u', 'n', 'c', ' ', 'g', '(', ')'}
	want, err := loaded.Logits(tokens, 1)
	require.NoError(t, err)

	w := len(tokens)
	g := NewGraph(b, "training_forward")
	defer g.Finalize()
	nodes := make([]*Node, len(tr.masters))
	for i, x := range tr.masters {
		nodes[i] = Parameter(g, "", x.Shape())
	}
	tok := Parameter(g, "tokens", shapes.Make(dtypes.Int32, 1, w))
	pos := Parameter(g, "positions", shapes.Make(dtypes.Int32, 1, w)) // not a constant: folding rounds otherwise
	logits := modelcore.Of(m).ForwardTraining(modelcore.Of(m).BindWeights(nodes), modelcore.TrainingWindow{Tokens: tok, Positions: pos,
		Visible: modelcore.CausalVisibility(g, w), DType: dtypes.Float32})
	require.NoError(t, g.Compile(logits))
	ids, positions := make([]int32, w), make([]int32, w)
	for i, x := range tokens {
		ids[i], positions[i] = int32(x), int32(i)
	}
	inputs := make([]any, 0, len(tr.masters)+2)
	for _, x := range tr.masters {
		inputs = append(inputs, x)
	}
	inputs = append(inputs, tensors.FromFlatDataAndDimensions(ids, 1, w), tensors.FromFlatDataAndDimensions(positions, 1, w))
	flat := tensors.MustCopyFlatData[float32](g.Run(inputs...)[0])
	for i := range want {
		require.Equal(t, want[i], flat[i*byteVocab:(i+1)*byteVocab], "row %d", i)
	}

	ckpt, err := safetensors.OpenCheckpoint(dir16)
	require.NoError(t, err)
	defer ckpt.Close()
	stored, err := ckpt.Float32s("model.norm.weight")
	require.NoError(t, err)
	master := tensors.MustCopyFlatData[float32](tr.Weights()[len(tr.masters)-1].Tensor)
	require.Equal(t, "model.norm.weight", tr.Weights()[len(tr.masters)-1].Name)
	for i := range master {
		require.Equal(t, float32(dtypesBF16(master[i])), stored[i])
	}
	_, ok := ckpt.Lookup("lm_head.weight")
	require.False(t, ok, "tied embeddings: no lm_head")
	config, err := model.LoadConfig(dir16)
	require.NoError(t, err)
	require.Equal(t, byteMask, config.MaskTokenID)
	require.Equal(t, byteBOS, config.BOSTokenID)
	require.Equal(t, []int{byteEOS}, config.EOSTokenIDs)
}

// dtypesBF16 rounds to bfloat16 (to nearest even) and back.
func dtypesBF16(x float32) float32 {
	bits := math.Float32bits(x)
	bits += 0x7fff + (bits>>16)&1
	return math.Float32frombits(bits &^ 0xffff)
}

// Evaluating a loaded checkpoint gives the trainer's own evaluation, and bits per byte
// are the nats over the bytes.
func TestEvaluate(t *testing.T) {
	b := testutil.Backend(t)
	data := smallData()
	m := microModel(t, microConfig(), 6)
	tr, err := New(m, data, smallConfig())
	require.NoError(t, err)
	defer tr.Close()
	require.NoError(t, tr.Step())
	ctx := context.Background()
	const bytes = 500
	own, err := tr.Evaluate(ctx, data, bytes, 0)
	require.NoError(t, err)
	require.Equal(t, int64(len(data.IDs)-12), own.Targets, "every token but the BOS of each document")
	require.InDelta(t, own.Nats/math.Ln2/bytes, own.BitsPerByte, 1e-12)

	dir := filepath.Join(t.TempDir(), "ckpt")
	require.NoError(t, tr.Save(dir, SaveOptions{DType: dtypes.Float32}))
	loaded, err := model.Load(b, dir, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer loaded.Close()
	other, err := Evaluate(ctx, loaded, data, EvalOptions{Batch: 4, SeqLen: 32, BOS: byteBOS, Bytes: bytes})
	require.NoError(t, err)
	require.Equal(t, own, other)

	first, err := tr.Evaluate(ctx, data, bytes, 1)
	require.NoError(t, err)
	require.Less(t, first.Targets, own.Targets)
	require.Zero(t, first.BitsPerByte)
}

// A bfloat16 step runs on the test backend and its loss is the float32 step's to
// bfloat16 precision.
func TestBFloat16Step(t *testing.T) {
	data := smallData()
	m := microModel(t, microConfig(), 7)
	losses := map[dtypes.DType]float64{}
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		cfg := smallConfig()
		cfg.DType = dtype
		tr, err := New(m, data, cfg)
		require.NoError(t, err)
		require.NoError(t, tr.Step())
		stats, err := tr.ReadStats()
		require.NoError(t, err)
		require.Equal(t, 1, stats.Steps)
		losses[dtype] = stats.Loss
		require.NoError(t, tr.Close())
	}
	require.InDelta(t, losses[dtypes.Float32], losses[dtypes.BFloat16], 0.02*losses[dtypes.Float32])
}

// A run stops before a deadline it cannot meet and when its context ends, and
// checkpoints either way.
func TestRunStops(t *testing.T) {
	data := smallData()
	m := microModel(t, microConfig(), 8)
	tr, err := New(m, data, smallConfig())
	require.NoError(t, err)
	defer tr.Close()
	dir := filepath.Join(t.TempDir(), "ckpt")
	rep, err := tr.Run(context.Background(), RunOptions{Deadline: time.Now(), CheckpointDir: dir})
	require.NoError(t, err)
	require.Equal(t, "deadline", rep.Stopped)
	require.Zero(t, rep.Steps)
	require.FileExists(t, filepath.Join(dir, StateFileName))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err = tr.Run(ctx, RunOptions{CheckpointDir: dir})
	require.NoError(t, err)
	require.Equal(t, "canceled", rep.Stopped)

	var progress, logs strings.Builder
	rep, err = tr.Run(context.Background(), RunOptions{Steps: 2, LogEvery: 1, Progress: &progress, Log: &logs})
	require.NoError(t, err)
	require.Contains(t, progress.String(), "tok/s")
	require.Contains(t, logs.String(), "step 2/2  loss ")
	require.Equal(t, "done", rep.Stopped)
	require.Equal(t, 2, rep.Steps)
	require.Greater(t, rep.Last.Loss, 0.0)
}
