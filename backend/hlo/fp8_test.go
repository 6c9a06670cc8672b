//go:build cgo && !noxla

package hlo_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

// With option triton=gemv, every FP8 linear layer of a quantized fixture model (its
// weight bytes decoded by quant's table) runs as our GEMV on the bytes themselves at
// 4 and 8 rows (Dot tiles fitted to the fixtures' small weights, fitDotTile), where
// bfloat16 weights keep XLA's products: one call reading f8E4M3FN per layer's qkv, o,
// gate/up and down, and no dense product left but the head's (bfloat16).
func TestTritonGEMVFP8InModels(t *testing.T) {
	forFP8Windows(t, "triton=gemv", func(t *testing.T, batch int, text string, layers int) {
		fp8 := tritonCallsWith(text, "!tt.ptr<f8E4M3FN>")
		dense, _ := denseDots(text)
		require.Equal(t, 4*layers, fp8, "batch %d: one GEMV on the bytes per FP8 layer", batch)
		require.Equal(t, 1, dense, "batch %d: only the head's product is XLA's", batch)
		for _, c := range tritonCalls(text) {
			if strings.Contains(c, "f8E4M3FN") {
				require.Regexp(t, fmt.Sprintf(`\(tensor<%dx\d+xbf16>, tensor<\d+x\d+xui8>\) -> tensor<`, 4*batch), c, "the bytes are the kernel's operand")
			}
		}
	})
}

// forFP8Windows checks, with check, the program of a 4-token window at batch 1 and 2
// of each fixture model quantized to FP8 (package quant's defaults), built by our
// backend with options.
func forFP8Windows(t *testing.T, options string, check func(t *testing.T, batch int, text string, layers int)) {
	b, err := hlo.NewBuildOnlyWithKernels(options)
	require.NoError(t, err)
	quantize := func(m *model.Model) error { return quant.QuantizeModel(m, quant.Options{}) }
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, batch := range []int{1, 2} {
				text, layers := windowTextOf(t, b, dir, batch, 4, true, quantize)
				check(t, batch, text, layers)
			}
		})
	}
}

// FP8 products of more than 16 rows run our GEMV on the bytes with a Dot tile of their
// rows, up to 32: at batch 8 a 4-token window's 32 rows run every FP8 layer so (with
// tiles the fixtures' small weights fit), its K loop split as TestSplitKInModels finds
// at 4 rows. Past 32 rows (batch 16: 64; batch 32: 128) none does: every FP8 layer's
// bytes are converted as f8E4M3FN values for XLA's GEMM (qkv and gate/up after
// triton=norm's kernel too; the table's decoding is left unused, for XLA to remove).
func TestTritonGEMVFP8ManyRowsInModels(t *testing.T) {
	defer setFittingFP8Tiles()()
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv")
	require.NoError(t, err)
	quantize := func(m *model.Model) error { return quant.QuantizeModel(m, quant.Options{}) }
	const rows32 = "tt.dot %xv, %wb, %a : tensor<32x32xbf16> * tensor<32x32xbf16>"
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			text, layers := windowTextOf(t, b, dir, 8, 4, true, quantize)
			require.Equal(t, 4*layers, tritonCallsWith(text, "!tt.ptr<f8E4M3FN>"), "one GEMV on the bytes per FP8 layer")
			require.Equal(t, 4*layers, tritonCallsWith(text, rows32), "a Dot tile of 32 rows")
			dense, _ := denseDots(text)
			require.Equal(t, 1, dense, "only the head's product is XLA's")
			requireSplitProducts(t, text, layers)

			for _, options := range []string{"triton=gemv", "triton=gemv,triton=fold,triton=norm"} {
				b, err := hlo.NewBuildOnlyWithKernels(options)
				require.NoError(t, err)
				for _, batch := range []int{16, 32} {
					text, layers := windowTextOf(t, b, dir, batch, 4, true, quantize)
					require.Zero(t, tritonCallsWith(text, "!tt.ptr<f8E4M3FN>"), "%s, %d rows: XLA's products", options, 4*batch)
					require.Equal(t, 4*layers, convertedWeights(text), "%s, %d rows: every FP8 layer's bytes converted", options, 4*batch)
				}
			}
		})
	}
}

// convertedWeights counts the weights whose bytes a program's text converts as
// f8E4M3FN values (a product that the norm kernel replaces leaves its conversion unused
// in the text, for XLA to remove: each weight counts once).
func convertedWeights(text string) int {
	weights := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `"stablehlo.bitcast_convert"(`) && strings.HasSuffix(line, "xf8E4M3FN>") {
			weights[strings.SplitN(strings.SplitN(line, "(", 2)[1], ")", 2)[0]] = true
		}
	}
	return len(weights)
}

// quantizeW8A8 quantizes m's linear layers but the head to FP8 with a static input
// scale each, from a calibration that puts every input's largest |x| at 4.
func quantizeW8A8(m *model.Model) error {
	calibration := &quant.Calibration{Format: quant.CalibrationFormat, DType: quant.CalibrationDType, BlockSize: 4,
		Layers: map[string]quant.LayerStats{}}
	for _, l := range modelcore.Of(m).Linears() {
		if l.Name != "lm_head" {
			calibration.Layers[l.Name] = quant.LayerStats{InputAmax: 4}
		}
	}
	return quant.QuantizeModel(m, quant.Options{Calibration: calibration})
}

// W8A8 layers (every layer's input quantized too, a static scale per layer) multiply
// a 4-row window's input bytes by the weight's on the tensor cores as FP8, one kernel
// per FP8 layer, and leave no dense product but the head's, with a Dot tile the
// fixtures' weights fit; with the default tiles, which they do not fit, the weight-only
// kernels take those products on the decoded input.
func TestTritonW8A8InModels(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv")
	require.NoError(t, err)
	const fp8Dot = "tt.dot %xv, %wv, %a : tensor<16x32xf8E4M3FN> * tensor<32x16xf8E4M3FN>"
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			text, layers := windowTextOf(t, b, dir, 1, 4, true, quantizeW8A8)
			require.Zero(t, tritonCallsWith(text, "%x: !tt.ptr<f8E4M3FN>"), "default tiles")
			require.Equal(t, 4*layers, tritonCallsWith(text, "!tt.ptr<f8E4M3FN>"), "the weight-only kernels")

			restore := setFittingFP8Tiles()
			text, layers = windowTextOf(t, b, dir, 1, 4, true, quantizeW8A8)
			restore()
			require.Equal(t, 4*layers, tritonCallsWith(text, fp8Dot), "one FP8 × FP8 kernel per FP8 layer")
			require.Equal(t, 4*layers, tritonCallsWith(text, "%x: !tt.ptr<f8E4M3FN>"), "the input's bytes are the kernel's operand")
			dense, _ := denseDots(text)
			require.Equal(t, 1, dense, "only the head's product is XLA's")
		})
	}
}

// With option triton=fold, the one-row windows of a quantized fixture model fold the
// norms, SwiGLU and residual adds around its FP8 layers into kernels that read the
// bytes and scale each sum (package quant's per-channel and per-tensor scales alike),
// where TestTritonFoldInModels' bfloat16 layers fold: qkv's and gate/up's norms (of
// their normalised input, normalisedProduct), o's and down's residual adds, down's
// SwiGLU. The head (bfloat16) folds as before.
func TestTritonFoldFP8InModels(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv,triton=fold")
	require.NoError(t, err)
	const normed, residual, swiGLU = "tt.func public @gemm_norm(", "%r: !tt.ptr<f32>", "tt.func public @gemm_swiglu("
	for _, strategy := range []quant.Strategy{quant.StrategyChannel, quant.StrategyTensor} {
		quantize := func(m *model.Model) error { return quant.QuantizeModel(m, quant.Options{Strategy: strategy}) }
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(fmt.Sprintf("%v/%s", strategy, filepath.Base(dir)), func(t *testing.T) {
				m, err := model.Load(hlo.PlainBuildOnly(), dir, model.LoadOptions{})
				require.NoError(t, err)
				cfg := m.Config
				require.NoError(t, m.Close())
				wantResidual := 2 * cfg.NumLayers
				if cfg.Architecture == model.ArchMiniCPM && cfg.ScaleDepth != math.Sqrt(float64(cfg.NumLayers)) {
					wantResidual = 0 // scaled residual adds, as TestTritonFoldInModels finds
				}
				text, layers := windowTextOf(t, b, dir, 1, 1, true, quantize)
				count := func(kind string) (n int) {
					for _, c := range tritonCalls(text) {
						if strings.Contains(c, kind) && strings.Contains(c, "%w: !tt.ptr<f8E4M3FN>") && strings.Contains(c, "%s: !tt.ptr<f32>") {
							n++
						}
					}
					return n
				}
				require.Equal(t, 2*layers, count(normed), "qkv's and gate/up's norms")
				require.Equal(t, wantResidual, count(residual), "o's and down's residual adds")
				require.Equal(t, wantResidual/2, count(swiGLU), "down's SwiGLU")
			})
		}
	}
}

// With option triton=norm, the norms before a quantized fixture model's FP8 layers of
// several rows (qkv's and gate/up's) run as our norm kernel returning the normalised
// row (RowNorm's Before), which our GEMV multiplies by the bytes (at 4 and 8 rows, on
// tiles fitted to the fixtures' small weights).
func TestTritonNormFP8InModels(t *testing.T) {
	forFP8Windows(t, "triton=gemv,triton=norm", func(t *testing.T, batch int, text string, layers int) {
		require.Equal(t, 2*layers, tritonCallsWith(text, "%xs = arith.mulf"), "batch %d: the normalised rows of qkv and gate/up", batch)
		// One per FP8 layer, and the two that qkv and gate/up first had on XLA's norm,
		// left unused for XLA to remove.
		want := 4*layers + 2*layers
		require.Equal(t, want, tritonCallsWith(text, "%w: !tt.ptr<f8E4M3FN>"), "batch %d: our GEMVs on the bytes", batch)
	})
}

// FP8 products of 2 to 32 rows split their K loop (splitK): with tiles the fixtures
// fit, the FP8 layers of a 4-row window (the Dot tile of DotRows rows; a 32-row one's
// many-rows tile in TestTritonGEMVFP8ManyRowsInModels) run split programs.
func TestSplitKInModels(t *testing.T) {
	defer setFittingFP8Tiles()()
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv")
	require.NoError(t, err)
	quantize := func(m *model.Model) error { return quant.QuantizeModel(m, quant.Options{}) }
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			text, layers := windowTextOf(t, b, dir, 1, 4, true, quantize)
			requireSplitProducts(t, text, layers)
		})
	}
}

// requireSplitProducts checks that the FP8 layers of a window's program text, whose K
// holds two steps of the fitting tiles (qkv, o and gate/up at K 64; down too where its
// K is 192), run split programs, whose partial sums a reduction adds.
func requireSplitProducts(t *testing.T, text string, layers int) {
	t.Helper()
	split := tritonCallsWith(text, "%pidk = arith.remsi")
	require.GreaterOrEqual(t, split, 3*layers, "split products")
	require.LessOrEqual(t, split, 4*layers, "split products")
	require.GreaterOrEqual(t, strings.Count(text, "stablehlo.reduce"), split, "a reduction per split product")
}
