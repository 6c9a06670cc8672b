//go:build cgo && !noxla

package triton

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"
	"github.com/stretchr/testify/require"
)

// GEMV checks its operands and tile, and emits one custom call of XLA's Triton target
// with the kernel's grid and output.
func TestGEMVCall(t *testing.T) {
	fn, in := inputs(t, "gemv", shapes.Make(dtypes.BFloat16, 3, 256), shapes.Make(dtypes.BFloat16, 40, 256),
		shapes.Make(dtypes.Float32, 3, 256))
	x, w, x32 := in[0], in[1], in[2]
	_, err := Kernels{}.GEMV(x32, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "want x [m, k] bfloat16")
	_, err = Kernels{}.GEMV(x, x32, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "w [n, k] bfloat16 or uint8")
	_, err = Kernels{}.GEMV(w, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "at 40 rows")
	_, err = Kernels{}.GEMV(x, w, Tile{BN: 16, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "does not divide")
	y, err := Kernels{}.GEMV(x, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.NoError(t, err)
	program := requireOneCall(t, fn, y, "-> tensor<3x40xf32>")
	require.Contains(t, program, "num_warps = 4 : i32")

	fn, in = inputs(t, "gemv_fp8", shapes.Make(dtypes.BFloat16, 3, 256), shapes.Make(dtypes.Uint8, 40, 256))
	y, err = Kernels{}.GEMV(in[0], in[1], Tile{BN: 8, BK: 128, Stages: 1}, dtypes.BFloat16)
	require.NoError(t, err)
	program = requireOneCall(t, fn, y, "-> tensor<3x40xbf16>")
	require.Contains(t, program, "tt.fp_to_fp", "FP8 bytes are read as their values")

	// x of FP8 bytes too (a W8A8 layer's input): both multiplied as FP8 by a Dot tile.
	fn, in = inputs(t, "gemv_w8a8", shapes.Make(dtypes.Uint8, 3, 256), shapes.Make(dtypes.Uint8, 80, 256), shapes.Make(dtypes.BFloat16, 80, 256))
	dot := Tile{BN: 16, BK: 128, Stages: 1, Dot: true}
	_, err = Kernels{}.GEMV(in[0], in[2], dot, dtypes.Float32)
	require.ErrorContains(t, err, "or both uint8")
	y, err = Kernels{}.GEMV(in[0], in[1], dot, dtypes.Float32)
	require.NoError(t, err)
	program = requireOneCall(t, fn, y, "-> tensor<3x80xf32>")
	require.Contains(t, program, "xf8E4M3FN> * tensor<128x16xf8E4M3FN>")
}

// inputs starts the main function of a program name with inputs of shapes ins.
func inputs(t *testing.T, name string, ins ...shapes.Shape) (*stablehlo.Function, []*stablehlo.Value) {
	t.Helper()
	fn := stablehlo.New(name).Main()
	vs := make([]*stablehlo.Value, len(ins))
	for i, s := range ins {
		var err error
		vs[i], err = fn.NamedInput(fmt.Sprintf("in%d", i), s)
		require.NoError(t, err)
	}
	return fn, vs
}

// requireOneCall returns y from fn and requires its program to hold one custom call of
// XLA's Triton target, on a grid of 5 programs, with result (its result type) in it.
// It returns the program's text.
func requireOneCall(t *testing.T, fn *stablehlo.Function, y *stablehlo.Value, result string) string {
	t.Helper()
	require.NoError(t, fn.Return(y))
	text, err := fn.Builder.Build()
	require.NoError(t, err)
	program := string(text)
	require.Equal(t, 1, strings.Count(program, `"`+Target+`"`))
	require.Contains(t, program, "grid_x = 5 : i32")
	require.Contains(t, program, result)
	return program
}

// GEMVNorm checks its operands and emits one custom call of XLA's Triton target whose
// kernel folds the norm: x·g rounded to bf16 in the loop, its 1/rms from the exact bits
// of the graph's constants.
func TestGEMVNormCall(t *testing.T) {
	fn, in := inputs(t, "gemv_norm", shapes.Make(dtypes.Float32, 1, 256), shapes.Make(dtypes.BFloat16, 256),
		shapes.Make(dtypes.BFloat16, 40, 256))
	x, g, w := in[0], in[1], in[2]
	tile, norm := Tile{BN: 8, BK: 128, Stages: 2}, Norm{InvK: 1.0 / 256, Eps: 1e-5}
	_, err := Kernels{}.GEMVNorm(w, g, w, nil, tile, norm)
	require.ErrorContains(t, err, "want x [parts, k] float32")
	_, err = Kernels{}.GEMVNorm(x, x, w, nil, tile, norm)
	require.ErrorContains(t, err, "want x [parts, k] float32")
	_, err = Kernels{}.GEMVNorm(x, g, w, nil, Tile{BN: 16, BK: 128, Stages: 2}, norm)
	require.ErrorContains(t, err, "does not divide")
	y, err := Kernels{}.GEMVNorm(x, g, w, nil, tile, norm)
	require.NoError(t, err)
	requireOneCall(t, fn, y, "-> tensor<1x40xf32>")

	ir, err := GEMVNormTTIR(40, 256, tile, norm, Weight{})
	require.NoError(t, err)
	require.Contains(t, ir, "arith.constant 0x3B800000 : f32") // 1/256
	require.Contains(t, ir, "arith.constant 0x3727C5AC : f32") // float32(1e-5)
	require.Contains(t, ir, "math.rsqrt")
	require.Contains(t, ir, "{tt.num_stages = 2 : i32}")
	require.Equal(t, 2, strings.Count(ir, "arith.truncf"), "x rounded, then x·g rounded")
	_, err = GEMVNormTTIR(40, 256, Tile{BN: 8, BK: 128, Stages: 1, Dot: true}, norm, Weight{})
	require.ErrorContains(t, err, "only 1-row tiles")
}

// GEMVResidual checks its operands and emits one custom call of XLA's Triton target
// whose kernel takes the residual after W and adds it to its sums.
func TestGEMVResidualCall(t *testing.T) {
	fn, in := inputs(t, "gemv_residual", shapes.Make(dtypes.BFloat16, 1, 256), shapes.Make(dtypes.BFloat16, 40, 256),
		shapes.Make(dtypes.Float32, 1, 40))
	x, w, r := in[0], in[1], in[2]
	tile := Tile{BN: 8, BK: 128, Stages: 2}
	_, err := Kernels{}.GEMVResidual(x, w, x, nil, tile)
	require.ErrorContains(t, err, "r [parts, n] float32")
	y, err := Kernels{}.GEMVResidual(x, w, r, nil, tile)
	require.NoError(t, err)
	requireOneCall(t, fn, y, "-> tensor<1x40xf32>")

	ir, err := GEMVResidualTTIR(1, 40, 256, tile, Weight{})
	require.NoError(t, err)
	require.Contains(t, ir, "%w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32>")
	require.Contains(t, ir, "%res0 = arith.addf %rv0, %sum0 : tensor<8xf32>")
	require.Contains(t, ir, "tt.store %yp0, %res0")
	plain, err := GEMVTTIR(1, 40, 256, tile, dtypes.BFloat16, dtypes.Float32)
	require.NoError(t, err)
	require.NotContains(t, plain, "%r: ")
	require.NotContains(t, plain, "%rbase")
	_, err = GEMVResidualTTIR(1, 40, 256, Tile{BN: 16, BK: 128, Stages: 1, Dot: true}, Weight{})
	require.ErrorContains(t, err, "only 1-row tiles")
}

// GEMVSwiGLUResidual checks its operands and emits one custom call of XLA's Triton
// target whose kernel reads gate and up k apart, computes SwiGLU in float32 and rounds
// it to bf16 before the product, and adds the residual.
func TestGEMVSwiGLUResidualCall(t *testing.T) {
	fn, in := inputs(t, "gemv_swiglu", shapes.Make(dtypes.Float32, 1, 512), shapes.Make(dtypes.BFloat16, 40, 256),
		shapes.Make(dtypes.Float32, 1, 40))
	gu, w, r := in[0], in[1], in[2]
	tile := Tile{BN: 8, BK: 128, Stages: 2}
	_, err := Kernels{}.GEMVSwiGLUResidual(r, w, r, nil, tile)
	require.ErrorContains(t, err, "want gu [1, 2k]")
	y, err := Kernels{}.GEMVSwiGLUResidual(gu, w, r, nil, tile)
	require.NoError(t, err)
	requireOneCall(t, fn, y, "-> tensor<1x40xf32>")

	ir, err := GEMVSwiGLUResidualTTIR(40, 256, tile, Weight{})
	require.NoError(t, err)
	require.Contains(t, ir, "%upoff = arith.constant dense<256> : tensor<1x128xi32>")
	require.Contains(t, ir, "math.exp")
	require.Equal(t, 1, strings.Count(ir, "arith.truncf"), "SwiGLU rounded once, to bf16")
	require.Contains(t, ir, "%res = arith.addf %rv, %sum")
	_, err = GEMVSwiGLUResidualTTIR(40, 256, Tile{BN: 16, BK: 128, Stages: 1, Dot: true}, Weight{})
	require.ErrorContains(t, err, "only 1-row tiles")
}

// Every kernel has one wait mark before anything it loads and one launch mark after its
// main loop; under PDL they become the grid dependency instructions, without it they
// stay comments.
func TestLaunchMarks(t *testing.T) {
	norm := Norm{InvK: 1.0 / 256, Eps: 1e-6}
	row, dot := Tile{BN: 8, BK: 128, Stages: 3}, Tile{BN: 32, BK: 128, Stages: 3, Dot: true}
	texts := map[string]func() (string, error){
		"gemm, 1 row":      func() (string, error) { return GEMVTTIR(1, 64, 256, row, dtypes.BFloat16, dtypes.BFloat16) },
		"gemm, 4 rows":     func() (string, error) { return GEMVTTIR(4, 64, 256, row, dtypes.BFloat16, dtypes.Float32) },
		"gemm, a Dot tile": func() (string, error) { return GEMVTTIR(4, 64, 256, dot, dtypes.BFloat16, dtypes.BFloat16) },
		"gemm_norm":        func() (string, error) { return GEMVNormTTIR(64, 256, row, norm, Weight{}) },
		"gemm, residual":   func() (string, error) { return GEMVResidualTTIR(1, 64, 256, row, Weight{}) },
		"gemm_swiglu":      func() (string, error) { return GEMVSwiGLUResidualTTIR(64, 256, row, Weight{}) },
		"gemm_norm, FP8":   func() (string, error) { return GEMVNormTTIR(64, 256, row, norm, Weight{FP8: true, Scaled: true}) },
		"residual, FP8":    func() (string, error) { return GEMVResidualTTIR(1, 64, 256, row, Weight{FP8: true, Scaled: true}) },
		"gemm_swiglu, FP8": func() (string, error) { return GEMVSwiGLUResidualTTIR(64, 256, row, Weight{FP8: true, Scaled: true}) },
		"gemm_norm, before": func() (string, error) {
			return GEMVNormTTIR(64, 256, row, Norm{InvK: 1.0 / 256, Eps: 1e-6, Before: true}, Weight{FP8: true, Scaled: true})
		},
		"attention": func() (string, error) { return AttentionTTIR(decodeAttention(1, 4)) },
		"combine":   func() (string, error) { return AttentionCombineTTIR(decodeAttention(1, 4)) },
	}
	for name, text := range texts {
		ir, err := text()
		require.NoError(t, err, name)
		require.Equal(t, 1, strings.Count(ir, waitMark), name)
		require.Equal(t, 1, strings.Count(ir, launchMark), name)
		require.Less(t, strings.Index(ir, waitMark), strings.Index(ir, "tt.load"), name)
		if strings.Contains(ir, "scf.yield") {
			require.Greater(t, strings.Index(ir, launchMark), strings.LastIndex(ir, "scf.yield"), name)
		}
		require.Less(t, strings.Index(ir, launchMark), strings.Index(ir, "tt.return"), name)

		same, err := Kernels{}.launchMarks(name, ir)
		require.NoError(t, err)
		require.Equal(t, ir, same, "without PDL the marks stay comments")
		pdl, err := Kernels{PDL: true}.launchMarks(name, ir)
		require.NoError(t, err)
		require.NotContains(t, pdl, "// pdl:")
		require.Less(t, strings.Index(pdl, "griddepcontrol.wait;"), strings.Index(pdl, "tt.load"), name)
		require.Equal(t, 1, strings.Count(pdl, "griddepcontrol.launch_dependents;"), name)
	}
	_, err := Kernels{PDL: true}.launchMarks("unmarked", "module {}")
	require.ErrorContains(t, err, "unmarked needs one mark of each kind")
	_, err = Kernels{}.launchMarks("unmarked", "module {}")
	require.NoError(t, err, "without PDL no mark is needed")
}

// The fold kernels take FP8 bytes with row scales (package quant's FP8 layers): W's
// loads are f8E4M3FN, s comes after r (and before y), and each sum is scaled before the
// 1/rms or the residual; the operands are checked.
func TestFoldKernelsFP8(t *testing.T) {
	fn, in := inputs(t, "gemv_norm_fp8", shapes.Make(dtypes.Float32, 1, 256), shapes.Make(dtypes.BFloat16, 256),
		shapes.Make(dtypes.Uint8, 40, 256), shapes.Make(dtypes.Float32, 40), shapes.Make(dtypes.Float32, 1, 40),
		shapes.Make(dtypes.BFloat16, 1, 256), shapes.Make(dtypes.Float32, 1, 512))
	x, g, w, s, r, xb, gu := in[0], in[1], in[2], in[3], in[4], in[5], in[6]
	tile, norm := Tile{BN: 8, BK: 128, Stages: 2}, Norm{InvK: 1.0 / 256, Eps: 1e-5}
	_, err := Kernels{}.GEMVNorm(x, g, w, r, tile, norm)
	require.ErrorContains(t, err, "want [40] float32")
	_, err = Kernels{}.GEMVResidual(xb, w, r, xb, tile)
	require.ErrorContains(t, err, "want [40] float32")
	_, err = Kernels{}.GEMVSwiGLUResidual(gu, s, r, s, tile)
	require.ErrorContains(t, err, "want [n, k] bfloat16 or uint8")
	y, err := Kernels{}.GEMVNorm(x, g, w, s, tile, norm)
	require.NoError(t, err)
	program := requireOneCall(t, fn, y, "-> tensor<1x40xf32>")
	require.Contains(t, program, "(tensor<1x256xf32>, tensor<256xbf16>, tensor<40x256xui8>, tensor<40xf32>) -> tensor<1x40xf32>")

	scaled := Weight{FP8: true, Scaled: true}
	ir, err := GEMVNormTTIR(40, 256, tile, norm, scaled)
	require.NoError(t, err)
	require.Contains(t, ir, "%w: !tt.ptr<f8E4M3FN> {tt.divisibility = 16 : i32}, %s: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32>")
	require.Contains(t, ir, "tt.fp_to_fp %wv")
	require.Less(t, strings.Index(ir, "%sum = arith.mulf %raw, %sv"), strings.Index(ir, "%yv = arith.mulf %sum, %invs"), "scaled, then 1/rms")
	ir, err = GEMVResidualTTIR(1, 40, 256, tile, scaled)
	require.NoError(t, err)
	require.Contains(t, ir, "%r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %s: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32>")
	require.Less(t, strings.Index(ir, "%sum0 = arith.mulf %raw0, %sv"), strings.Index(ir, "%res0 = arith.addf %rv0, %sum0"), "scaled, then the residual")
	ir, err = GEMVSwiGLUResidualTTIR(40, 256, tile, scaled)
	require.NoError(t, err)
	require.Contains(t, ir, "%r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %s: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32>")
	require.Less(t, strings.Index(ir, "%sum = arith.mulf %raw, %sv"), strings.Index(ir, "%res = arith.addf %rv, %sum"), "scaled, then the residual")
	// Quantized layers' input is normalised before the product: the squares are summed
	// in a loop of their own, x scaled by 1/rms before its roundings, the sums stored
	// after their scales.
	norm.Before = true
	ir, err = GEMVNormTTIR(40, 256, tile, norm, scaled)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(ir, "scf.for"))
	require.Less(t, strings.Index(ir, "%iv = math.rsqrt"), strings.Index(ir, "%loop = scf.for"), "1/rms before the product's loop")
	require.Contains(t, ir, "%xs = arith.mulf %xv, %ivk : tensor<1x128xf32>")
	require.Contains(t, ir, "%xb = arith.truncf %xs")
	require.NotContains(t, ir, "%invs")
	require.Contains(t, ir, "tt.store %yp, %sum")
	unscaled, err := GEMVSwiGLUResidualTTIR(40, 256, tile, Weight{FP8: true})
	require.NoError(t, err)
	require.NotContains(t, unscaled, "%s: ")
	require.NotContains(t, unscaled, "%raw")
}

// A GEMV tile's Warps are its call's.
func TestGEMVCallWarps(t *testing.T) {
	fn, in := inputs(t, "gemv_w8", shapes.Make(dtypes.BFloat16, 4, 512), shapes.Make(dtypes.Uint8, 160, 512))
	y, err := Kernels{}.GEMV(in[0], in[1], Tile{BN: 32, BK: 512, Stages: 3, Dot: true, Warps: 8}, dtypes.BFloat16)
	require.NoError(t, err)
	require.Contains(t, requireOneCall(t, fn, y, "-> tensor<4x160xbf16>"), "num_warps = 8 : i32")
}

// The split down GEMV: each program takes its part of K and of y's rows, only part 0
// adds r, and parts that do not split K into whole steps are refused.
func TestGEMVSwiGLUSplitTTIR(t *testing.T) {
	tile := Tile{BN: 8, BK: 128, Stages: 2}
	ir, err := GEMVSwiGLUSplitTTIR(40, 512, tile, 2)
	require.NoError(t, err)
	for _, want := range []string{
		"%ctiles = arith.constant 5 : i32",
		"%part = arith.divsi %pid, %ctiles",
		"%cpart = arith.constant 256 : i32",
		"scf.for %k = %kstart to %kend step %cBK",
		"%first = arith.cmpi eq, %part, %c0 : i32",
		"%rv = tt.load %rp, %firsts, %rzero : tensor<8x!tt.ptr<f32>>",
		"%cn = arith.constant 40 : i32",
		"%yp = tt.addptr %ybase, %yoff",
		"%res = arith.addf %rv, %sum",
	} {
		require.Contains(t, ir, want)
	}
	requireWellFormed(t, ir)
	require.Equal(t, 1, strings.Count(ir, waitMark))
	_, err = GEMVSwiGLUSplitTTIR(40, 384, tile, 2)
	require.ErrorContains(t, err, "whole 128-column steps")
	_, err = GEMVSwiGLUSplitTTIR(40, 512, tile, 1)
	require.Error(t, err)
}

// The split down GEMV's call runs its parts on twice the programs and returns them
// [2, n]; the GEMVs that read a layer's output take such parts as their x or r and sum
// their rows in order as they load them.
func TestGEMVParts(t *testing.T) {
	fn, in := inputs(t, "gemv_split", shapes.Make(dtypes.Float32, 1, 512), shapes.Make(dtypes.BFloat16, 40, 256),
		shapes.Make(dtypes.Float32, 1, 40))
	y, err := Kernels{}.GEMVSwiGLUSplit(in[0], in[1], in[2], Tile{BN: 8, BK: 128, Stages: 1}, 2)
	require.NoError(t, err)
	require.NoError(t, fn.Return(y))
	text, err := fn.Builder.Build()
	require.NoError(t, err)
	require.Contains(t, string(text), "grid_x = 10 : i32")
	require.Contains(t, string(text), "-> tensor<2x40xf32>")

	tile, norm := Tile{BN: 8, BK: 128, Stages: 2}, Norm{InvK: 1.0 / 256, Eps: 1e-5}
	for _, before := range []bool{false, true} {
		norm.Before = before
		fn, in = inputs(t, "gemv_norm_parts", shapes.Make(dtypes.Float32, 2, 256), shapes.Make(dtypes.BFloat16, 256),
			shapes.Make(dtypes.BFloat16, 40, 256))
		y, err = Kernels{}.GEMVNorm(in[0], in[1], in[2], nil, tile, norm)
		require.NoError(t, err)
		requireOneCall(t, fn, y, "-> tensor<1x40xf32>")
		ir, err := GEMVNormTTIR(40, 256, tile, norm, Weight{})
		require.NoError(t, err)
		ir, err = sumParts(ir, "xv", 2, 256)
		require.NoError(t, err)
		if before {
			ir, err = sumParts(ir, "xq", 2, 256)
			require.NoError(t, err)
		}
		requireWellFormed(t, ir)
		require.Contains(t, ir, "%xv_o1 = arith.constant dense<256> : tensor<1x128xi32>")
		require.Contains(t, ir, "%xv = arith.addf %xv_v0, %xv_v1 : tensor<1x128xf32>")
	}

	ir, err := GEMVResidualTTIR(1, 40, 256, tile, Weight{})
	require.NoError(t, err)
	three, err := sumParts(ir, "rv0", 3, 40)
	require.NoError(t, err)
	requireWellFormed(t, three)
	require.Contains(t, three, "%rv0_s1 = arith.addf %rv0_v0, %rv0_v1 : tensor<8xf32>")
	require.Contains(t, three, "%rv0 = arith.addf %rv0_s1, %rv0_v2 : tensor<8xf32>")
	require.Contains(t, three, "%rv0_o2 = arith.constant dense<80> : tensor<8xi32>")
	_, err = sumParts(ir, "nothing", 2, 40)
	require.ErrorContains(t, err, "no single load")
}

// Each 1-row GEMV kernel, peeled: the first W tile is loaded before the wait, the
// loop's first step runs on it after the wait under new names, and the loop starts at
// the second step from the peeled step's results; every value is defined once.
func TestFirstWBeforeWait(t *testing.T) {
	row := Tile{BN: 8, BK: 128, Stages: 3}
	norm := Norm{InvK: 1.0 / 256, Eps: 1e-5}
	for name, text := range map[string]func() (string, error){
		"gemm":           func() (string, error) { return GEMVTTIR(1, 64, 256, row, dtypes.BFloat16, dtypes.BFloat16) },
		"gemm, residual": func() (string, error) { return GEMVResidualTTIR(1, 64, 256, row, Weight{}) },
		"gemm_norm":      func() (string, error) { return GEMVNormTTIR(64, 256, row, norm, Weight{}) },
		"gemm_swiglu":    func() (string, error) { return GEMVSwiGLUResidualTTIR(64, 256, row, Weight{}) },
		"gemm, residual, one step": func() (string, error) {
			return GEMVResidualTTIR(1, 64, 128, Tile{BN: 8, BK: 128, Stages: 1}, Weight{})
		},
	} {
		ir, err := text()
		require.NoError(t, err, name)
		peeled, err := firstWBeforeWait(name, ir)
		require.NoError(t, err, name)
		first, wait := strings.Index(peeled, "%wfirst = tt.load %wp0 : tensor<8x128x!tt.ptr<bf16>>"), strings.Index(peeled, waitMark)
		require.Positive(t, first, name)
		require.Less(t, first, wait, name)
		require.Equal(t, 1, strings.Count(peeled, waitMark), name)
		require.Equal(t, 1, strings.Count(peeled[:wait], "tt.load"), "%s: only W's first tile is read before the wait", name)
		require.Contains(t, peeled, "scf.for %k = %cBK to %cK step %cBK iter_args(", name)
		require.Contains(t, peeled, "%wf_0 = arith.extf %wfirst", name)
		seen := map[string]bool{}
		for _, d := range ssaDefinition.FindAllStringSubmatch(peeled, -1) {
			require.False(t, seen[d[1]], "%s: %s defined twice", name, d[1])
			seen[d[1]] = true
		}
	}
	_, err := firstWBeforeWait("combine", "module {}")
	require.ErrorContains(t, err, "no 1-row K loop")
}
