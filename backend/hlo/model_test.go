//go:build cgo && !noxla

package hlo_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/safetensors"
)

// programText compiles build over inputs as a program of m and returns its StableHLO.
func programText(t *testing.T, m *model.Model, name string, inputs []shapes.Shape, build modelcore.BuildFunc) string {
	t.Helper()
	p, err := modelcore.Of(m).Compile(name, inputs, build)
	require.NoError(t, err, name)
	text, err := hlo.Program(p.Graph().Executable())
	require.NoError(t, err)
	return string(text)
}

// The forward passes of every fixture model build on the backend without our kernels,
// in its default compute dtype (bfloat16, as on a GPU): without a cache, block-causal
// and causal, asking for the fused attention, and cached windows that write the cache
// or only read it.
func TestModelProgramsBuild(t *testing.T) {
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, err := model.Load(hlo.PlainBuildOnly(), dir, model.LoadOptions{})
			require.NoError(t, err)
			defer func() { require.NoError(t, m.Close()) }()
			require.Equal(t, dtypes.BFloat16, m.DType)
			v := m.Config.VocabSize
			logits := func(b, r int) string { return fmt.Sprintf("tensor<%dx%dx%dxf32>", b, r, v) }

			for _, block := range []int{1, 4} {
				name := fmt.Sprintf("logits_block%d", block)
				text := programText(t, m, name, []shapes.Shape{i32(1, 8)}, func(w *modelcore.Weights, in []*Node) []*Node {
					start := Zeros(in[0].Graph(), i32(1))
					out, _ := modelcore.Of(m).Forward(w, modelcore.Window{Tokens: in[0], Start: start, BlockSize: block}, nil, nil)
					return []*Node{out}
				})
				requireProgram(t, text, logits(1, 8))
			}

			cacheShape := modelcore.Of(m).CacheShape(2, 32)
			inputs := []shapes.Shape{i32(2, 4), i32(2)}
			for range 2 * m.Config.NumLayers {
				inputs = append(inputs, cacheShape)
			}
			for _, write := range []bool{false, true} {
				text := programText(t, m, fmt.Sprintf("cached_write%t", write), inputs, func(w *modelcore.Weights, in []*Node) []*Node {
					g := in[0].Graph()
					win := modelcore.Window{Tokens: in[0], Start: in[1], CacheLen: in[1], BlockSize: 4,
						LogitIndices: Const(g, [][]int32{{3}, {3}})}
					if write {
						win.WriteLen = Const(g, []int32{4, 2})
					}
					out, cache := modelcore.Of(m).Forward(w, win, modelcore.CacheNodesFrom(in[2:]), nil)
					return append([]*Node{out}, cache.Nodes()...)
				})
				requireProgram(t, text, logits(2, 1))
				require.Equal(t, write, strings.Contains(text, "stablehlo.scatter"), "a scatter writes the cache")
			}
		})
	}
}

// With triton=gemv-all, a bf16 fixture model's cached window of 4 positions at batch 1
// (the denoise step) runs every dense layer, and the head, as our Triton GEMV of 4
// rows; attention's products (batch axes) stay dot_generals. Without the option there
// is no Triton call.
func TestTritonGEMVInModels(t *testing.T) {
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			plain, _ := windowText(t, hlo.PlainBuildOnly(), dir, 1, 4)
			lowered, _ := windowText(t, tritonOnly(t), dir, 1, 4)
			require.Empty(t, tritonCalls(plain))
			dense, batched := denseDots(plain)
			require.Positive(t, dense)
			calls := tritonCalls(lowered)
			require.Len(t, calls, dense, "every dense product is lowered")
			loweredDense, loweredBatched := denseDots(lowered)
			require.Zero(t, loweredDense, "a dense dot_general is left")
			require.Equal(t, batched, loweredBatched, "attention's products are kept")
			for _, c := range calls {
				require.Contains(t, c, "-> tensor<4x", "4 rows")
			}
			t.Logf("%d dense products lowered, %d batched products kept", dense, batched)
		})
	}
}

// With triton=attention, a bf16 fixture model's cached window of 4 positions that writes
// (a commit: its keys in their slots) runs each layer's attention over its cache as
// our Triton kernels, at batch 1 and 2: two calls per layer (the splits, then their
// combination), and none of attention's batched products left. At batch 2 each layer
// orders the removal of uncommitted keys after the kernels' read by one optimization
// barrier (without it XLA copies the cache twice a layer).
func TestTritonAttentionInModels(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=attention")
	require.NoError(t, err)
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, batch := range []int{1, 2} {
				text, layers := windowText(t, b, dir, batch, 4)
				calls := tritonCalls(text)
				require.Len(t, calls, 2*layers)
				for i, c := range calls {
					require.Contains(t, c, []string{"tt.func public @attention(", "tt.func public @combine("}[i%2])
				}
				_, batched := denseDots(text)
				require.Zero(t, batched, "attention's products are left")
				require.Equal(t, min(batch-1, 1)*layers, strings.Count(text, "stablehlo.optimization_barrier"))
			}
		})
	}
}

// With triton=fold, a bf16 fixture model's AR step (one token at batch 1) runs each
// normed dense layer as our GEMV with the norm folded in: qkv and gate/up in every
// layer, and the head where the model scales none of its logits (not MiniCPM's
// dim_model_base); and the residual adds after o and down in those GEMVs, where the
// model does not scale what it adds (not MiniCPM's scale_depth), down's with SwiGLU
// before it. That holds whether or not our GEMV computes the plain products
// (triton=gemv-all, or triton=gemv, which leaves these small ones to XLA). A window of
// 4 rows keeps the plain products.
func TestTritonFoldInModels(t *testing.T) {
	for _, options := range []string{"triton=gemv-all,triton=fold", "triton=gemv,triton=fold"} {
		b, err := hlo.NewBuildOnlyWithKernels(options)
		require.NoError(t, err)
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(options+"/"+filepath.Base(dir), func(t *testing.T) {
				m, err := model.Load(hlo.PlainBuildOnly(), dir, model.LoadOptions{})
				require.NoError(t, err)
				cfg := m.Config
				require.NoError(t, m.Close())
				minicpm := cfg.Architecture == model.ArchMiniCPM
				wantNormed, wantResidual := 2*cfg.NumLayers, 2*cfg.NumLayers
				if !minicpm || cfg.DimModelBase == float64(cfg.HiddenSize) {
					wantNormed++
				}
				if minicpm && cfg.ScaleDepth != math.Sqrt(float64(cfg.NumLayers)) {
					wantResidual = 0
				}
				const normed, residual, swiGLU = "tt.func public @gemm_norm(", "%r: !tt.ptr<f32>", "tt.func public @gemm_swiglu("
				text, _ := windowText(t, b, dir, 1, 1)
				require.Equal(t, wantNormed, tritonCallsWith(text, normed))
				require.Equal(t, wantResidual, tritonCallsWith(text, residual))
				require.Equal(t, wantResidual/2, tritonCallsWith(text, swiGLU))
				text, _ = windowText(t, b, dir, 1, 4)
				require.Zero(t, tritonCallsWith(text, normed))
				require.Zero(t, tritonCallsWith(text, residual))
			})
		}
	}
}

// With option triton=pdl every Triton kernel of the AR step (our GEMVs, the folds and
// the attention kernels) waits for the kernels before it and lets the next one launch;
// without it none does. A build-only backend keeps the option: New drops it on
// devices without programmatic dependent launch.
func TestTritonPDLInModels(t *testing.T) {
	dir := fixtures.Subdirs(t, "models")[0]
	const options = "triton=gemv-all,triton=attention,triton=fold"
	for _, pdl := range []bool{false, true} {
		o := options
		if pdl {
			o += ",triton=pdl"
		}
		b, err := hlo.NewBuildOnlyWithKernels(o)
		require.NoError(t, err)
		text, _ := windowText(t, b, dir, 1, 1)
		calls := tritonCallsWith(text, "tt.func")
		require.Positive(t, tritonCallsWith(text, "tt.func public @attention("), "the attention kernel runs")
		want := 0
		if pdl {
			want = calls
		}
		require.Equal(t, want, tritonCallsWith(text, "griddepcontrol.wait;"), o)
		require.Equal(t, want, tritonCallsWith(text, "griddepcontrol.launch_dependents;"), o)
	}
}

// With option triton=rope our attention kernel reads the float32 rows of the qkv
// product and rotates the queries itself in every layer of the fixture models'
// one-token windows, at batch 1 and 2; without it, and in four-token windows, the
// kernel reads rotated queries.
func TestTritonRopeInModels(t *testing.T) {
	const rotating, reading = "tt.func public @attention(%x: !tt.ptr<f32>", "tt.func public @attention(%q: !tt.ptr<bf16>"
	for _, dir := range fixtures.Subdirs(t, "models") {
		for _, rope := range []bool{false, true} {
			options := "triton=attention"
			if rope {
				options += ",triton=rope"
			}
			b, err := hlo.NewBuildOnlyWithKernels(options)
			require.NoError(t, err)
			for _, w := range [][2]int{{1, 1}, {1, 4}, {2, 1}, {2, 4}} {
				text, layers := windowText(t, b, dir, w[0], w[1])
				name := fmt.Sprintf("%s %s, batch %d, width %d", filepath.Base(dir), options, w[0], w[1])
				rotates := rope && w[1] == 1
				want := map[bool]int{false: 0, true: layers}
				require.Equal(t, want[rotates], tritonCallsWith(text, rotating), name)
				require.Equal(t, want[!rotates], tritonCallsWith(text, reading), name)
			}
		}
	}
}

// With option triton=place (and triton=rope, whose rows it reads) our attention
// kernel takes every layer's one-token window's key and value from the qkv product's
// rows, and writes them into the cache (its outputs aliased to the cache operands),
// at batch 1 and 2; windows of 4 that write (the cache's update reads their keys
// anyway) and the options without it leave the placement to XLA. A window of 4 at
// batch 1 that writes nothing (a denoise step) has its keys and values taken from the
// rows too, with the option only: without it the model concatenates them with the
// cache.
func TestTritonPlaceInModels(t *testing.T) {
	const reading = "%start: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %oacc"
	for _, dir := range fixtures.Subdirs(t, "models") {
		for _, options := range []string{"triton=attention,triton=rope", "triton=attention,triton=rope,triton=place"} {
			b, err := hlo.NewBuildOnlyWithKernels(options)
			require.NoError(t, err)
			text, layers := windowTextWrites(t, b, dir, 1, 4, false)
			name := fmt.Sprintf("%s %s, a denoise step", filepath.Base(dir), options)
			if strings.HasSuffix(options, "place") {
				require.Equal(t, layers, tritonCallsWith(text, reading), name)
				require.Equal(t, 2*layers, strings.Count(text, "stablehlo.dynamic_update_slice"), name+": model's placements, dead code for XLA")
			} else {
				require.Empty(t, tritonCalls(text), name)
				require.Zero(t, strings.Count(text, "stablehlo.dynamic_update_slice"), name)
			}
		}
	}

	const placing = "%start: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %written: !tt.ptr<i32>"
	for _, dir := range fixtures.Subdirs(t, "models") {
		for _, options := range []string{"triton=attention,triton=rope", "triton=attention,triton=rope,triton=place"} {
			b, err := hlo.NewBuildOnlyWithKernels(options)
			require.NoError(t, err)
			for _, w := range [][2]int{{1, 1}, {1, 4}, {2, 1}, {2, 4}} {
				text, layers := windowText(t, b, dir, w[0], w[1])
				name := fmt.Sprintf("%s %s, batch %d, width %d", filepath.Base(dir), options, w[0], w[1])
				want := 0
				if strings.HasSuffix(options, "place") && w[1] == 1 {
					want = layers
				}
				require.Equal(t, want, tritonCallsWith(text, placing), name)
				require.Zero(t, tritonCallsWith(text, reading), name+": a window that writes keeps XLA's placement")
				require.Equal(t, want, strings.Count(text, "output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [3], operand_index = 3, operand_tuple_indices = []>, "+
					"#stablehlo.output_operand_alias<output_tuple_indices = [4], operand_index = 4, operand_tuple_indices = []>]"), name)
			}
		}
	}
}

// windowText is the StableHLO, built on b, of the bf16 fixture model of dir's forward
// of a window of width positions at batch rows over a cache of 32 slots that writes
// them all (a commit), and the model's number of layers.
func windowText(t *testing.T, b *hlo.Backend, dir string, batch, width int) (text string, layers int) {
	t.Helper()
	return windowTextWrites(t, b, dir, batch, width, true)
}

// windowTextWrites is windowText of a window that writes its positions into the cache
// or, writes false, nothing (a denoise step).
func windowTextWrites(t *testing.T, b *hlo.Backend, dir string, batch, width int, writes bool) (text string, layers int) {
	t.Helper()
	return windowTextOf(t, b, dir, batch, width, writes, nil)
}

// windowTextOf is windowTextWrites of the model that prepare (when not nil) changes
// after loading it.
func windowTextOf(t *testing.T, b *hlo.Backend, dir string, batch, width int, writes bool, prepare func(*model.Model) error) (text string, layers int) {
	t.Helper()
	m, err := model.Load(b, dir, model.LoadOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	require.Equal(t, dtypes.BFloat16, m.DType)
	if prepare != nil {
		require.NoError(t, prepare(m))
	}
	inputs := []shapes.Shape{i32(batch, width), i32(batch)}
	for range 2 * m.Config.NumLayers {
		inputs = append(inputs, modelcore.Of(m).CacheShape(batch, 32))
	}
	text = programText(t, m, fmt.Sprintf("window/%d/%d/%v", batch, width, writes), inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		win := modelcore.Window{Tokens: in[0], Start: in[1], CacheLen: in[1], BlockSize: 4}
		if writes {
			win.WriteLen = AddScalar(ZerosLike(in[1]), float64(width))
		}
		out, cache := modelcore.Of(m).Forward(w, win, modelcore.CacheNodesFrom(in[2:]), nil)
		return append([]*Node{out}, cache.Nodes()...)
	})
	return text, m.Config.NumLayers
}

// requireProgram checks that text is a StableHLO module with a main function that
// multiplies matrices and returns the logits type among its results.
func requireProgram(t *testing.T, text, logits string) {
	t.Helper()
	require.True(t, strings.HasPrefix(text, "module @"), "not a module")
	require.True(t, strings.Contains(text, "stablehlo.dot_general"), "no dot_general")
	_, main, ok := strings.Cut(text, "func.func @main(")
	require.True(t, ok, "no main function")
	signature, _, _ := strings.Cut(main, "{\n")
	require.Contains(t, signature, logits)
}

// The FP8 graphs of package quant build: both weight decoders in a linear layer with an
// input scale and per-channel weight scales, and the in-graph E4M3 encoder.
func TestQuantGraphsBuild(t *testing.T) {
	bf16 := shapes.Make(dtypes.BFloat16, 2, 16)
	weight := shapes.Make(dtypes.Uint8, 8, 16)
	for _, decoder := range []quant.Decoder{quant.DecoderLUT, quant.DecoderBits} {
		text := build(t, []shapes.Shape{bf16, weight, f32(8), f32()}, func(g *Graph, in []*Node) []*Node {
			return []*Node{(&quant.FP8Linear{Decoder: decoder}).ApplyFloat32(in[0], in[1:])}
		})
		requireOp(t, text, "dot_general", "2x8xf32")
	}
	text := build(t, []shapes.Shape{f32(4, 5)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{quant.EncodeE4M3Node(in[0], true)}
	})
	require.Contains(t, text, "tensor<4x5xui8>")
}

// With option triton=norm every RMSNorm before a dense layer of several rows runs as
// our norm kernel: the first layer's on the embedding alone, every later one on the
// residual add before it, and the head's where its logits are not scaled (tiny-llama);
// one-row windows keep XLA's norms (or triton=fold's GEMVs).
func TestTritonNormInModels(t *testing.T) {
	const plain, summed = "tt.func public @norm(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g:",
		"tt.func public @norm(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %b:"
	for _, options := range []string{"triton=norm", "triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm"} {
		b, err := hlo.NewBuildOnlyWithKernels(options)
		require.NoError(t, err)
		for _, dir := range fixtures.Subdirs(t, "models") {
			for _, w := range [][2]int{{1, 1}, {1, 4}, {2, 1}, {2, 4}} {
				text, layers := windowText(t, b, dir, w[0], w[1])
				name := fmt.Sprintf("%s %s, batch %d, width %d", filepath.Base(dir), options, w[0], w[1])
				wantPlain, wantSummed := 0, 0
				if w[0]*w[1] > 1 {
					wantPlain, wantSummed = 1, 2*layers-1
					if filepath.Base(dir) == "tiny-llama" { // the MiniCPM fixtures scale their logits
						wantSummed++
					}
				}
				require.Equal(t, wantPlain, tritonCallsWith(text, plain), name)
				require.Equal(t, wantSummed, tritonCallsWith(text, summed), name)
			}
		}
	}
}

// A one-token window at batch 1 and 2 over a cache too large to copy (2 key/value
// heads of 128 over 4608 slots, MiniCPM5-2B's past 4095: past the model's copy bound)
// still takes its own slot where our attention kernel places windows (triton=place):
// the kernel takes its key and value from the qkv product's rows in every layer, where
// the options without it do not (at batch 1 they attend over cache and window apart:
// two products, XLA's).
func TestTritonPlacePastCopyBound(t *testing.T) {
	const placing = "%start: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %written: !tt.ptr<i32>"
	const layers, capacity = 2, 4608
	dir := zeroCheckpoint(t, layers)
	for _, options := range []string{"triton=attention,triton=rope", "triton=attention,triton=rope,triton=place"} {
		b, err := hlo.NewBuildOnlyWithKernels(options)
		require.NoError(t, err)
		for _, batch := range []int{1, 2} {
			m, err := model.Load(b, dir, model.LoadOptions{})
			require.NoError(t, err)
			inputs := []shapes.Shape{i32(batch, 1), i32(batch)}
			for range 2 * layers {
				inputs = append(inputs, modelcore.Of(m).CacheShape(batch, capacity))
			}
			text := programText(t, m, "commit of 1", inputs, func(w *modelcore.Weights, in []*Node) []*Node {
				win := modelcore.Window{Tokens: in[0], Start: in[1], CacheLen: in[1], BlockSize: 1, WriteLen: OnesLike(in[1])}
				out, cache := modelcore.Of(m).Forward(w, win, modelcore.CacheNodesFrom(in[2:]), nil)
				return append([]*Node{out}, cache.Nodes()...)
			})
			require.NoError(t, m.Close())
			name := fmt.Sprintf("%s, batch %d", options, batch)
			if strings.HasSuffix(options, "place") {
				require.Equal(t, layers, tritonCallsWith(text, placing), name)
				require.Equal(t, layers, tritonCallsWith(text, "tt.func public @attention("), name+": our attention over the cache")
			} else if require.Zero(t, tritonCallsWith(text, placing), name); batch == 1 {
				require.Empty(t, tritonCalls(text), name)
				require.Len(t, opTexts(text, "dot_general"), layers*(4+4)+1, name+": per layer qkv, o, gate-up, down and two score and two value products; the head")
			}
		}
	}
}

// zeroCheckpoint writes a Llama checkpoint of the given layers whose weights are all
// zero, for programs built only: hidden 256, 2 query and 2 key/value heads of 128,
// FFN 256, vocab 512, untied.
func zeroCheckpoint(t *testing.T, layers int) string {
	t.Helper()
	dir := t.TempDir()
	const hidden, heads, d, ffn, vocab = 256, 2, 128, 256, 512
	config := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "vocab_size": %d, "hidden_size": %d,
  "intermediate_size": %d, "num_hidden_layers": %d, "num_attention_heads": %d, "num_key_value_heads": %d,
  "head_dim": %d, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
  "hidden_act": "silu", "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}`,
		vocab, hidden, ffn, layers, heads, heads, d)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644))
	var w safetensors.Writer
	add := func(name string, dims ...int) {
		n := 2 // bytes of a bfloat16
		for _, d := range dims {
			n *= d
		}
		require.NoError(t, w.Add(name, safetensors.BF16, dims, make([]byte, n)))
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, n := range []string{"q", "k", "v", "o"} {
			add(p+"self_attn."+n+"_proj.weight", heads*d, hidden)
		}
		add(p+"mlp.gate_proj.weight", ffn, hidden)
		add(p+"mlp.up_proj.weight", ffn, hidden)
		add(p+"mlp.down_proj.weight", hidden, ffn)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
	}
	require.NoError(t, w.WriteFile(filepath.Join(dir, "model.safetensors")))
	return dir
}

// Option splitdown: the AR step's down GEMVs split their K loop (3 ways on tiny-llama,
// whose down weight has 192 columns of steps of 64) and return their parts; every GEMV
// that reads a layer's output, the next layer's q/k/v and o GEMVs and the head's, reads
// the parts and sums them as it loads them. With 2 parts, which do not divide its 3
// steps, nothing is split.
func TestSplitDownInModels(t *testing.T) {
	dir := filepath.Join(fixtures.Dir(t), "models", "tiny-llama")
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv,triton=fold,splitdown=2")
	require.NoError(t, err)
	text, _ := windowText(t, b, dir, 1, 1)
	require.NotContains(t, text, "%kstart = arith.muli %part")

	b, err = hlo.NewBuildOnlyWithKernels("triton=gemv,triton=fold,splitdown=3")
	require.NoError(t, err)
	text, layers := windowText(t, b, dir, 1, 1)
	const hidden = 64
	parts := fmt.Sprintf("tensor<3x%dxf32>", hidden)
	require.Equal(t, layers, tritonCallsWith(text, "%kstart = arith.muli %part"), "every down GEMV split")
	require.Equal(t, layers, tritonCallsWith(text, "-> "+parts), "every down GEMV returns its parts")
	require.Equal(t, layers, tritonCallsWith(text, "%xv = arith.addf %xv_s1, %xv_v2"), "the q/k/v GEMV after the first layer and the head read parts")
	require.Equal(t, layers-1, tritonCallsWith(text, "%rv0 = arith.addf %rv0_s1, %rv0_v2"), "the o GEMV after the first layer reads parts")
	for _, c := range tritonCalls(text) {
		if strings.Contains(c, "%xv_v2") || strings.Contains(c, "%rv0_v2") {
			require.True(t, strings.Contains(c, ": ("+parts) || strings.Contains(c, ", "+parts+") ->"),
				"a reader's x (its first operand) or r (its last) is the parts")
		}
	}
}

// Option triton=preload: at the AR step (a one-token window at batch 1) every layer's o
// GEMV takes a tile of 2 rows of the whole K and loads it before its PDL wait, and the
// attention and combine before it let it launch right after their own wait; a 4-token
// window's attention does not, and without the option nothing is preloaded.
func TestPreloadInModels(t *testing.T) {
	dir := filepath.Join(fixtures.Dir(t), "models", "tiny-llama")
	const kernels = "triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=place"
	// The kernels' text as the custom call's config holds it, escaped twice.
	early := `griddepcontrol.wait; mov.u32 $0, 0;\\22 {constraints = \\22=r\\22, packed_element = 1 : i32, pure = false} -> i32\\0A    %pdl_launch`
	for _, c := range []struct {
		options       string
		width         int
		loads, starts int // o GEMVs loading W before their wait; kernels launching the next after it, per layer
	}{
		{kernels + ",triton=preload", 1, 1, 2},
		{kernels + ",triton=preload", 4, 0, 0},
		{kernels, 1, 0, 0},
	} {
		b, err := hlo.NewBuildOnlyWithKernels(c.options)
		require.NoError(t, err)
		text, layers := windowText(t, b, dir, 1, c.width)
		require.Equal(t, c.loads*layers, tritonCallsWith(text, "%wfirst = tt.load %wp0 : tensor<2x128x!tt.ptr<bf16>>"), "%s, width %d", c.options, c.width)
		require.Equal(t, c.starts*layers, tritonCallsWith(text, early), "%s, width %d", c.options, c.width)
	}
}
