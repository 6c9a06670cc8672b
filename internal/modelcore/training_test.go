package modelcore

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// tinyLlama is a small Llama configuration with tied embeddings.
func tinyLlama() Config {
	return Config{
		Architecture: ArchLlama, VocabSize: 48, HiddenSize: 16, IntermediateSize: 24,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 4, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeAttentionFactor: 1, TieWordEmbeddings: true,
		ScaleEmb: 1, DimModelBase: 16, BOSTokenID: 1, EOSTokenIDs: []int{2}, MaskTokenID: 47,
	}
}

// blockVisibility is the [w, w] block-causal visibility of blockSize as host data.
func blockVisibility(w, blockSize int) *tensors.Tensor {
	vis := make([]bool, w*w)
	for q := range w {
		for k := range w {
			vis[q*w+k] = k/blockSize <= q/blockSize
		}
	}
	return tensors.FromFlatDataAndDimensions(vis, w, w)
}

// ForwardTraining in float32 computes Forward's logits bit for bit, with the model's
// weights or bound ones, at all positions or selected ones, causal or block-causal.
func TestForwardTrainingMatchesLogits(t *testing.T) {
	for name, cfg := range map[string]Config{"minicpm": tinyConfig(), "llama": tinyLlama()} {
		t.Run(name, func(t *testing.T) {
			m := randomModel(t, cfg, 3)
			const w = 12
			tokens := make([]int, w)
			for i := range tokens {
				tokens[i] = (i*7 + 3) % cfg.VocabSize
			}
			for _, blockSize := range []int{1, 4} {
				want, err := m.Logits(tokens, blockSize)
				require.NoError(t, err)
				inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, w), shapes.Make(dtypes.Bool, w, w), shapes.Make(dtypes.Int32, 1, 3),
					shapes.Make(dtypes.Int32, 1, w), shapes.Make(dtypes.Int32, 1)}
				p, err := m.Compile("train_forward", inputs, func(wt *Weights, in []*Node) []*Node {
					win := TrainingWindow{Tokens: in[0], Positions: in[3], Visible: in[1]}
					all := m.ForwardTraining(wt, win)
					// The same weights bound as the caller's nodes.
					params, err := m.TrainableParams()
					require.NoError(t, err)
					bound := m.BindWeights(wt.Nodes(tensorsOf(params)))
					win.LogitIndices = in[2]
					// Forward over the same rows: products of other shapes round otherwise.
					rows, _ := m.Forward(wt, Window{Tokens: in[0], Start: in[4], BlockSize: blockSize, LogitIndices: in[2]}, nil, nil)
					return []*Node{all, m.ForwardTraining(bound, win), rows}
				})
				require.NoError(t, err)
				positions := make([]int, w)
				for i := range positions {
					positions[i] = i
				}
				out, err := p.Run(tokensTensor(tokens), blockVisibility(w, blockSize), tensors.FromValue([][]int32{{0, 5, 11}}), tokensTensor(positions), tensors.FromValue([]int32{0}))
				require.NoError(t, err)
				got, err := logitRows(out[0])
				require.NoError(t, err)
				require.Equal(t, want, got, "block size %d", blockSize)
				picked, err := logitRows(out[1])
				require.NoError(t, err)
				rows, err := logitRows(out[2])
				require.NoError(t, err)
				require.Equal(t, rows, picked, "block size %d", blockSize)
				require.InDeltaSlice(t, want[5], picked[1], 1e-5)
			}
		})
	}
}

func tensorsOf(params []Param) []*tensors.Tensor {
	out := make([]*tensors.Tensor, len(params))
	for i, p := range params {
		out[i] = p.Tensor
	}
	return out
}

// The gradient of a linear function of ForwardTraining's logits with respect to the
// bound weights matches central finite differences, for coordinates of every kind of
// weight (embedding, norms through 1/rms, attention and MLP layers).
func TestForwardTrainingGradient(t *testing.T) {
	b := testutil.Backend(t)
	cfg := tinyLlama()
	m := randomModel(t, cfg, 5)
	params, err := m.TrainableParams()
	require.NoError(t, err)
	const w = 8
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([][]float32, len(params))
	for i, p := range params {
		values[i] = tensors.MustCopyFlatData[float32](p.Tensor)
		for j := range values[i] {
			values[i][j] += float32(rng.NormFloat64() * 0.3) // away from init: norms not all one
		}
	}
	tokens := make([]int32, w)
	coef := make([]float32, w*cfg.VocabSize)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(cfg.VocabSize))
	}
	for i := range coef {
		coef[i] = float32(rng.NormFloat64())
	}

	names, shapesOf := make([]string, len(params)), make([]shapes.Shape, len(params))
	for i, p := range params {
		names[i], shapesOf[i] = p.Name, p.Tensor.Shape()
	}
	// eps 1e-2: after Richardson, O(eps⁴) and the float32 rounding of the loss (about
	// 1e-6 relative, over eps) remain.
	checked := testutil.GradientCheck{Names: names, Shapes: shapesOf, Eps: 1e-2, RelTol: 1e-3, AbsTol: 1e-4,
		Loss: func(g *Graph, nodes []*Node) *Node {
			tok := Const(g, [][]int32{tokens})
			vis := Const(g, tensors.MustCopyFlatData[bool](blockVisibility(w, 1)))
			vis = Reshape(vis, w, w)
			pos := Iota(g, shapes.Make(dtypes.Int32, 1, w), 1)
			logits := m.ForwardTraining(m.BindWeights(nodes), TrainingWindow{Tokens: tok, Positions: pos, Visible: vis})
			return ReduceAllSum(Mul(logits, Reshape(Const(g, coef), 1, w, cfg.VocabSize)))
		}}.Run(t, b, values, rng)
	require.Equal(t, 2*len(params), checked)
}

// A model saved in float32 loads back to the same logits, in one file or in shards
// bounded in size; in bfloat16 it loads as the bfloat16 model it was.
func TestSaveLoad(t *testing.T) {
	b := testutil.Backend(t)
	cfg := tinyLlama()
	cfg.TieWordEmbeddings = false
	m := randomModel(t, cfg, 7)
	tokens := []int{1, 5, 9, 3, 40, 2}
	want, err := m.Logits(tokens, 1)
	require.NoError(t, err)
	for _, shard := range []int64{0, 4096} {
		dir := t.TempDir()
		require.NoError(t, m.Save(dir, SaveOptions{DType: dtypes.Float32, MaxShardBytes: shard}))
		if shard > 0 {
			files, err := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
			require.NoError(t, err)
			require.Greater(t, len(files), 1)
			for _, f := range files {
				info, err := os.Stat(f)
				require.NoError(t, err)
				require.LessOrEqual(t, info.Size(), shard, f)
			}
		}
		loaded, err := Load(b, dir, LoadOptions{DType: dtypes.Float32})
		require.NoError(t, err)
		require.Equal(t, cfg, loaded.Config)
		got, err := loaded.Logits(tokens, 1)
		require.NoError(t, err)
		require.Equal(t, want, got, "shards of %d bytes", shard)
		require.NoError(t, loaded.Close())
	}

	dir := t.TempDir()
	require.NoError(t, m.Save(dir, SaveOptions{}))
	half, err := Load(b, dir, LoadOptions{DType: dtypes.BFloat16})
	require.NoError(t, err)
	defer half.Close()
	again := t.TempDir()
	require.NoError(t, half.Save(again, SaveOptions{}))
	for _, name := range []string{"config.json", "model.safetensors"} {
		first, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		second, err := os.ReadFile(filepath.Join(again, name))
		require.NoError(t, err)
		require.Equal(t, first, second, "%s: a bfloat16 save of the bfloat16 load is the same file", name)
	}
}

// Config.JSON parses back to the same configuration.
func TestConfigJSONRoundTrip(t *testing.T) {
	withRope := tinyConfig()
	withRope.RopeFactors = []float64{1, 2, 3, 4}
	withRope.RopeAttentionFactor = 1.25
	withRope.EOSTokenIDs = []int{2, 5}
	for _, cfg := range []Config{tinyConfig(), tinyLlama(), withRope} {
		data, err := cfg.JSON()
		require.NoError(t, err)
		back, err := ParseConfig(data)
		require.NoError(t, err)
		require.Equal(t, cfg, back, "%s", data)
	}
}
