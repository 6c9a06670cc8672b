//go:build cgo && !noxla

package hlo_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/backend/hlo/triton"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/safetensors"
)

// stepShape is the shape the step programs are built for: MiniCPM5-2B's layers (hidden
// 2048, FFN 6144, 16 query and 2 key/value heads of 128) but two of them, and a
// vocabulary of 4096 (its head, 8 Mi weights, is as large as a GEMV our backend lowers
// needs), written as a Llama checkpoint of zero weights.
var stepShape = func() model.Config {
	cfg := model.MiniCPM5_2B
	cfg.NumLayers, cfg.VocabSize, cfg.MaskTokenID = 2, 4096, 4095
	return cfg
}()

// stepCheckpoint writes stepShape's checkpoint once per test binary, into a folder
// TestMain removes.
var stepCheckpoint = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "blockdiff-stepshape-")
	if err != nil {
		return "", err
	}
	stepCheckpointDir = dir
	return dir, writeZeroCheckpoint(dir, stepShape)
})

// stepCheckpointDir is stepCheckpoint's folder, once written.
var stepCheckpointDir string

// TestMain runs the tests, then removes stepCheckpoint's folder (some 200 MB).
func TestMain(m *testing.M) {
	code := m.Run()
	if stepCheckpointDir != "" {
		_ = os.RemoveAll(stepCheckpointDir)
	}
	os.Exit(code)
}

// writeZeroCheckpoint writes a Llama checkpoint of cfg's shape whose bfloat16 weights
// are all zero, for programs built only.
func writeZeroCheckpoint(dir string, cfg model.Config) error {
	config := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "vocab_size": %d, "hidden_size": %d,
  "intermediate_size": %d, "num_hidden_layers": %d, "num_attention_heads": %d, "num_key_value_heads": %d,
  "head_dim": %d, "max_position_embeddings": %d, "rms_norm_eps": %g, "rope_theta": %g,
  "hidden_act": "silu", "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "mask_token_id": %d}`,
		cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads,
		cfg.HeadDim, cfg.MaxPositionEmbeddings, cfg.RMSNormEps, cfg.RopeTheta, cfg.MaskTokenID)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		return err
	}
	var w safetensors.Writer
	var err error
	add := func(name string, dims ...int) {
		n := 2 // bytes of a bfloat16
		for _, d := range dims {
			n *= d
		}
		if err == nil {
			err = w.Add(name, safetensors.BF16, dims, make([]byte, n))
		}
	}
	h, d := cfg.HiddenSize, cfg.HeadDim
	add("model.embed_tokens.weight", cfg.VocabSize, h)
	add("model.norm.weight", h)
	add("lm_head.weight", cfg.VocabSize, h)
	for l := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"self_attn.q_proj.weight", cfg.NumHeads*d, h)
		add(p+"self_attn.k_proj.weight", cfg.NumKVHeads*d, h)
		add(p+"self_attn.v_proj.weight", cfg.NumKVHeads*d, h)
		add(p+"self_attn.o_proj.weight", h, cfg.NumHeads*d)
		add(p+"mlp.gate_proj.weight", cfg.IntermediateSize, h)
		add(p+"mlp.up_proj.weight", cfg.IntermediateSize, h)
		add(p+"mlp.down_proj.weight", h, cfg.IntermediateSize)
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
	}
	if err != nil {
		return err
	}
	return w.WriteFile(filepath.Join(dir, "model.safetensors"))
}

// stepProgram is a program the decoder runs: a window of Width positions at Batch rows
// over a cache of stepCapacity slots holding stepContext positions, writing Write of
// them (the bench's step kinds), or a prefill of Width positions into an empty cache.
type stepProgram struct {
	Name                string
	Batch, Width, Write int
	Block               int
	Prefill             bool
}

// Cache capacity and positions in it of the step programs: the bench's defaults.
const stepCapacity, stepContext = 2048, 512

// stepPrograms are the programs whose kernels TestKernelPlan checks.
var stepPrograms = []stepProgram{
	{Name: "ar", Batch: 1, Width: 1, Write: 1, Block: 1},
	{Name: "denoise", Batch: 1, Width: 4, Write: 0, Block: 4},
	{Name: "fused", Batch: 1, Width: 8, Write: 4, Block: 4},
	{Name: "ar-b8", Batch: 8, Width: 1, Write: 1, Block: 1},
	{Name: "denoise-b8", Batch: 8, Width: 4, Write: 0, Block: 4},
	{Name: "fused-b8", Batch: 8, Width: 8, Write: 4, Block: 4},
	{Name: "prefill", Batch: 1, Width: 128, Write: 128, Block: 4, Prefill: true},
}

// stepModels are the model variants the step programs are built for: bfloat16, FP8
// weight-only with per-channel scales, and FP8 W8A8 with per-tensor scales.
var stepModels = []string{"bf16", "fp8", "w8a8"}

// loadStepModel loads stepShape's model on b in variant (of stepModels).
func loadStepModel(t *testing.T, b *hlo.Backend, variant string) *model.Model {
	t.Helper()
	dir, err := stepCheckpoint()
	require.NoError(t, err)
	m, err := model.Load(b, dir, model.LoadOptions{})
	require.NoError(t, err)
	switch variant {
	case "fp8":
		require.NoError(t, quant.QuantizeModel(m, quant.Options{}))
	case "w8a8":
		layers := map[string]quant.LayerStats{}
		for _, name := range quant.LayerNames(m.Config) {
			if name != quant.HeadName {
				layers[name] = quant.LayerStats{InputAmax: 4}
			}
		}
		c := &quant.Calibration{Format: quant.CalibrationFormat, DType: quant.CalibrationDType, BlockSize: 4, Layers: layers}
		require.NoError(t, quant.QuantizeModel(m, quant.Options{Strategy: quant.StrategyTensor, Calibration: c}))
	}
	return m
}

// text builds p for m and returns its StableHLO.
func (p stepProgram) text(t *testing.T, m *model.Model) string {
	t.Helper()
	inputs := []shapes.Shape{i32(p.Batch, p.Width)}
	for range 2 * m.Config.NumLayers {
		inputs = append(inputs, modelcore.Of(m).CacheShape(p.Batch, stepCapacity))
	}
	return programText(t, m, "step/"+p.Name, inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		g := in[0].Graph()
		fill := func(v int) *Node { return Const(g, slices.Repeat([]int32{int32(v)}, p.Batch)) }
		win := modelcore.Window{Tokens: in[0], BlockSize: p.Block}
		if p.Prefill {
			win.Start = fill(0)
			win.LogitIndices = Const(g, slices.Repeat([][]int32{{int32(p.Width - 1)}}, p.Batch))
		} else {
			win.Start, win.CacheLen = fill(stepContext), fill(stepContext)
		}
		if p.Write > 0 {
			win.WriteLen = fill(p.Write)
		}
		logits, cache := modelcore.Of(m).Forward(w, win, modelcore.CacheNodesFrom(in[1:]), nil)
		out := []*Node{ConvertDType(ArgMax(logits, -1), dtypes.Int32)}
		if p.Write > 0 {
			out = append(out, cache.Nodes()...)
		}
		return out
	})
}

// With BLOCKDIFF_PROGRAM_GOLDEN set to a folder, the step programs of every model
// variant, built with the backend's kernels and without, are compared with the texts
// that folder holds, or written there where it holds none: a refactoring of the
// model or the backend that must not change the programs run on the GPU checks them
// so against the programs built before it.
func TestStepProgramsGolden(t *testing.T) {
	dir := os.Getenv("BLOCKDIFF_PROGRAM_GOLDEN")
	if dir == "" {
		t.Skip("BLOCKDIFF_PROGRAM_GOLDEN is not set")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, backend := range []string{"kernels", "plain"} {
		b := goldenBackend(t, backend)
		for _, variant := range stepModels {
			m := loadStepModel(t, b, variant)
			for _, p := range stepPrograms {
				name := fmt.Sprintf("%s-%s-%s.mlir", backend, variant, p.Name)
				text := p.text(t, m)
				path := filepath.Join(dir, name)
				want, err := os.ReadFile(path)
				if os.IsNotExist(err) {
					require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
					t.Logf("wrote %s (%d bytes)", path, len(text))
					continue
				}
				require.NoError(t, err)
				if string(want) != text {
					got := path + ".got"
					require.NoError(t, os.WriteFile(got, []byte(text), 0o644))
					t.Errorf("%s differs from the golden text: see %s", name, got)
				}
			}
			require.NoError(t, m.Close())
		}
	}
}

// goldenBackend is the build-only backend of the golden texts: "kernels", as New makes
// it by default (as on an H200), or "plain", XLA's own ops (option nokernels).
func goldenBackend(t *testing.T, which string) *hlo.Backend {
	t.Helper()
	if which == "plain" {
		b, err := hlo.NewBuildOnlyWith("nokernels")
		require.NoError(t, err)
		return b
	}
	return hlo.NewBuildOnly()
}

// liveKernels returns the kinds (kernelKind) of the Triton calls of text's main function
// whose results the program uses: XLA removes the others, such as the GEMV of a product
// that a kernel later took over with the work around it.
func liveKernels(text string) map[string]int {
	_, body, _ := strings.Cut(text, "func.func @main(")
	lines := strings.Split(body, "\n")
	// The statements of main's body: each starts on a line of its indentation (not a
	// region's closing brace) and runs to the next; main ends at its closing brace.
	type statement struct {
		text  string
		reads []string
	}
	var statements []statement
	defined := map[string]int{} // name -> its statement
	name := regexp.MustCompile(`%[A-Za-z0-9_]+`)
	const indent = "    "
	starts := func(line string) bool {
		return strings.HasPrefix(line, indent) && line[len(indent)] != ' ' && line[len(indent)] != '}'
	}
	end := func(line string) bool { return line == "  }" }
	for i := 1; i < len(lines) && !end(lines[i]); {
		j := i + 1
		for j < len(lines) && !end(lines[j]) && !starts(lines[j]) {
			j++
		}
		text := strings.Join(lines[i:j], "\n")
		s := statement{text: text}
		if results, rest, ok := strings.Cut(text, " = "); ok && strings.HasPrefix(strings.TrimSpace(results), "%") {
			for _, r := range name.FindAllString(results, -1) {
				defined[r] = len(statements)
			}
			text = rest
		}
		s.reads = name.FindAllString(text, -1)
		statements = append(statements, s)
		i = j
	}
	live := make([]bool, len(statements))
	var mark func(int)
	mark = func(i int) {
		if live[i] {
			return
		}
		live[i] = true
		for _, r := range statements[i].reads {
			if d, ok := defined[r]; ok {
				mark(d)
			}
		}
	}
	for i, s := range statements {
		if strings.HasPrefix(strings.TrimSpace(s.text), `"stablehlo.return"`) {
			mark(i)
		}
	}
	kinds := map[string]int{}
	for i, s := range statements {
		if live[i] && strings.Contains(s.text, `call_target_name = "`+triton.Target+`"`) {
			kinds[kernelKind(s.text)]++
		}
	}
	return kinds
}

// kernelKind names what a Triton call of ours computes, from its kernel's name and
// arguments: e.g. "norm+gemv/fp8", "attention+rope+place".
func kernelKind(call string) string {
	_, rest, _ := strings.Cut(call, `{name = \22`)
	if _, r, ok := strings.Cut(call, `{name = \"`); ok {
		rest = r
	}
	kernel, _, _ := strings.Cut(rest, `\`)
	has := func(s string) bool { return strings.Contains(call, s) }
	weight := ""
	switch {
	case has("%x: !tt.ptr<f8E4M3FN>"):
		weight = "/fp8×fp8"
	case has("%w: !tt.ptr<f8E4M3FN>"):
		weight = "/fp8"
	}
	switch kernel {
	case "gemm":
		if has("%r: !tt.ptr<f32>") {
			return "gemv+residual" + weight
		}
		return "gemv" + weight
	case "gemm_norm":
		return "norm+gemv" + weight
	case "gemm_swiglu":
		if has("%kstart = arith.muli %part") {
			return "swiglu+gemv+residual/split" + weight
		}
		return "swiglu+gemv+residual" + weight
	case "norm":
		if has("%b: !tt.ptr<f32>") {
			return "residual+norm"
		}
		return "norm"
	case "attention":
		kind := "attention"
		if has("tt.func public @attention(%x:") {
			kind += "+rope"
		}
		if has("%start: !tt.ptr<i32>") {
			kind += "+place"
		}
		if has("%written: !tt.ptr<i32>") {
			kind += "+write"
		}
		return kind
	}
	return kernel
}

// kinds counts kernels by kind (kernelKind).
type kinds map[string]int

// kernelPlan is the kernels a program runs: per layer, and once (the head's, and
// corrections for the first layer, whose norm has no residual add before it).
type kernelPlan struct{ perLayer, once kinds }

// total is the plan's count of each kind over layers.
func (p kernelPlan) total(layers int) kinds {
	out := kinds{}
	for k, n := range p.perLayer {
		out[k] += layers * n
	}
	for k, n := range p.once {
		if out[k] += n; out[k] == 0 {
			delete(out, k)
		}
	}
	return out
}

// Norms of several rows: each layer's two, on the residual add before it, but the first
// layer's first on the embedding alone; and the head's, on the last residual add, where
// it reads several rows (firstAndHead), or folded into its GEMV (firstOnly, plus that).
var (
	rowNorms     = kinds{"residual+norm": 2}
	firstAndHead = kinds{"norm": 1}
	firstOnly    = kinds{"norm": 1, "residual+norm": -1}
)

// The kernels that the step programs of the MiniCPM5-2B shape (stepShape) run on our
// backend, with every kernel of ours, per model variant: the plan a change of the model
// or of the backend must keep (or change here, knowingly). Kernels XLA removes as
// unused are not counted (liveKernels).
var kernelPlans = map[string]map[string]kernelPlan{
	"bf16": {
		// The AR step folds every layer's work around its products into one-row GEMVs.
		"ar": {kinds{"norm+gemv": 2, "attention+rope+place+write": 1, "combine": 1, "gemv+residual": 1, "swiglu+gemv+residual/split": 1},
			kinds{"norm+gemv": 1}},
		"denoise": {with(rowNorms, kinds{"attention+rope+place": 1, "combine": 1}), firstAndHead},
		"fused":   {with(rowNorms, kinds{"attention": 1, "combine": 1}), firstAndHead},
		"ar-b8":   {with(rowNorms, kinds{"attention+rope+place+write": 1, "combine": 1}), firstAndHead},
		// At batch 8 the denoise step attends over cache and window concatenated.
		"denoise-b8": {rowNorms, firstAndHead},
		"fused-b8":   {with(rowNorms, kinds{"attention": 1, "combine": 1}), firstAndHead},
		// The prefill's attention is cuDNN's; its head reads one row.
		"prefill": {rowNorms, with(firstOnly, kinds{"norm+gemv": 1})},
	},
	"fp8": {
		"ar": {kinds{"norm+gemv/fp8": 2, "attention+rope+place+write": 1, "combine": 1, "gemv+residual/fp8": 1, "swiglu+gemv+residual/fp8": 1},
			kinds{"norm+gemv": 1}},
		"denoise":    {with(rowNorms, kinds{"gemv/fp8": 4, "attention+rope+place": 1, "combine": 1}), firstAndHead},
		"fused":      {with(rowNorms, kinds{"gemv/fp8": 4, "attention": 1, "combine": 1}), firstAndHead},
		"ar-b8":      {with(rowNorms, kinds{"gemv/fp8": 4, "attention+rope+place+write": 1, "combine": 1}), firstAndHead},
		"denoise-b8": {with(rowNorms, kinds{"gemv/fp8": 4}), firstAndHead},
		// 64 rows: XLA's GEMM reads the bytes.
		"fused-b8": {with(rowNorms, kinds{"attention": 1, "combine": 1}), firstAndHead},
		"prefill":  {rowNorms, with(firstOnly, kinds{"norm+gemv": 1})},
	},
	// W8A8 layers quantize their input: no norm folds into them, only the head's.
	"w8a8": {
		"ar": {kinds{"gemv/fp8": 2, "attention+rope+place+write": 1, "combine": 1, "gemv+residual/fp8": 2},
			kinds{"norm+gemv": 1}},
		"denoise":    {kinds{"gemv/fp8×fp8": 4, "attention+rope+place": 1, "combine": 1}, kinds{"residual+norm": 1}},
		"fused":      {kinds{"gemv/fp8×fp8": 4, "attention": 1, "combine": 1}, kinds{"residual+norm": 1}},
		"ar-b8":      {kinds{"gemv/fp8×fp8": 4, "attention+rope+place+write": 1, "combine": 1}, kinds{"residual+norm": 1}},
		"denoise-b8": {kinds{"gemv/fp8": 4}, kinds{"residual+norm": 1}},
		"fused-b8":   {kinds{"attention": 1, "combine": 1}, kinds{"residual+norm": 1}},
		"prefill":    {kinds{}, kinds{"norm+gemv": 1}},
	},
}

// with is the kinds of a and b together.
func with(a, b kinds) kinds {
	out := maps.Clone(a)
	for k, n := range b {
		out[k] += n
	}
	return out
}

// The kernel plan: the step programs of the MiniCPM5-2B shape, built on our backend as
// it runs on the GPU, run the kernels kernelPlans lists, no more and no fewer, so that
// a change that drops one of our kernels (a model refactored so that the backend no
// longer takes a fused operation, a fold removed) fails here.
func TestKernelPlan(t *testing.T) {
	b := goldenBackend(t, "kernels")
	for _, variant := range stepModels {
		m := loadStepModel(t, b, variant)
		for _, p := range stepPrograms {
			want := kernelPlans[variant][p.Name].total(m.Config.NumLayers)
			require.Equal(t, want, kinds(liveKernels(p.text(t, m))), "%s, %s", variant, p.Name)
		}
		require.NoError(t, m.Close())
	}
}
