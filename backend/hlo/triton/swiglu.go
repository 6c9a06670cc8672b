package triton

import (
	"fmt"
	"strings"
)

// GEMVSwiGLUResidualTTIR is the TTIR module of the kernel @gemm_swiglu: for one float32
// row gu [2k] (gate, then up), W [n, k] as w says and the float32 residual r [n],
// y[n0:n0+bn] = r + bf16(gate·σ(gate)·up) · W[n0:n0+bn, :]ᵀ, float32 (the product times
// W's row scales s first, with w.Scaled), its arguments gu, W, r, (s,) y in that order.
// That is model's down projection of swiGLU(gate/up) and the residual add after it,
// with SwiGLU computed in float32 and rounded to bf16 as the graph does (σ as
// 1/(1+exp(-x))), as each program loads its K step of gate and up: SwiGLU's own kernel
// goes. It runs n/bn programs of GEMVTTIR's 1-row loop, Stages deep, gate and up [1,
// bk] tiles as GEMVNormTTIR's x.
func GEMVSwiGLUResidualTTIR(n, k int, t Tile, w Weight) (string, error) {
	if err := checkRowTile("GEMV with SwiGLU", 1, n, k, t); err != nil {
		return "", err
	}
	return rowKernel(swigluText(w), k, t, w.dtype()), nil
}

// swigluText is GEMVSwiGLUResidualTTIR's kernel before rowKernel fills it in.
func swigluText(w Weight) string {
	return `module {
  tt.func public @gemm_swiglu(%gu: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %w: !tt.ptr<$WT> {tt.divisibility = 16 : i32}, %r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, ` + w.scaleArg() + `%y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + programStart + rowTile + `    %gbase = tt.splat %gu : !tt.ptr<f32> -> tensor<1x$BKx!tt.ptr<f32>>
    %gp0 = tt.addptr %gbase, %rk2 : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %upoff = arith.constant dense<$K> : tensor<1x$BKxi32>
    %up0 = tt.addptr %gp0, %upoff : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %one = arith.constant dense<1.000000e+00> : tensor<1x$BKxf32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    %acc = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero) -> (tensor<$BNx$BKxf32>) : i32 {
` + wTile + `      %kx = tt.splat %k : i32 -> tensor<1x$BKxi32>
      %gk = tt.addptr %gp0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %gv = tt.load %gk : tensor<1x$BKx!tt.ptr<f32>>
      %uk = tt.addptr %up0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %uv = tt.load %uk : tensor<1x$BKx!tt.ptr<f32>>
      %ng = arith.negf %gv : tensor<1x$BKxf32>
      %eg = math.exp %ng : tensor<1x$BKxf32>
      %den = arith.addf %one, %eg : tensor<1x$BKxf32>
      %sig = arith.divf %one, %den : tensor<1x$BKxf32>
      %silu = arith.mulf %gv, %sig : tensor<1x$BKxf32>
      %sw = arith.mulf %silu, %uv : tensor<1x$BKxf32>
      %swb = arith.truncf %sw : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %swf = arith.extf %swb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xb = tt.broadcast %swf : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p = arith.mulf %wf, %xb : tensor<$BNx$BKxf32>
      %a1 = arith.addf %a, %p : tensor<$BNx$BKxf32>
      scf.yield %a1 : tensor<$BNx$BKxf32>
    }$LOOPATTR
` + launchMark + `` + sumTile("%acc", w) + `    %rbase = tt.splat %r : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>
    %rp = tt.addptr %rbase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    %rv = tt.load %rp : tensor<$BNx!tt.ptr<f32>>
    %res = arith.addf %rv, %sum : tensor<$BNxf32>
` + storeRows("%res")
}

// GEMVSwiGLUSplitTTIR is GEMVSwiGLUResidualTTIR's kernel with its K loop split over
// splits programs per tile of BN rows, so that twice (or more) the programs stream W
// and each computes SwiGLU over its part of K only: program p takes part s = p / (n/bn)
// of K, [s·k/splits, (s+1)·k/splits), and writes its partial sums to row s of y
// [splits, n] float32, part 0 with r added. The layer's output is then y[0] + y[1] +
// ..., summed in that order by whoever reads it (no atomics: the order is fixed). It
// runs n/bn × splits programs; k/splits must be a multiple of bk. W is bfloat16: the
// fold splits only bfloat16 down projections (option splitdown).
func GEMVSwiGLUSplitTTIR(n, k int, t Tile, splits int) (string, error) {
	if splits < 2 || k%splits != 0 || (k/splits)%t.BK != 0 {
		return "", fmt.Errorf("triton: GEMV with SwiGLU split %d ways: K %d must split into parts of whole %d-column steps", splits, k, t.BK)
	}
	if err := checkRowTile("GEMV with SwiGLU", 1, n, k, t); err != nil {
		return "", err
	}
	var w Weight // bfloat16
	text := swigluText(w)
	tiles := n / t.BN
	for _, r := range []struct{ old, new string }{
		// The program's tile and part of K.
		{"    %n0 = arith.muli %pid, %cBN : i32\n", fmt.Sprintf(`    %%ctiles = arith.constant %d : i32
    %%part = arith.divsi %%pid, %%ctiles : i32
    %%tile = arith.remsi %%pid, %%ctiles : i32
    %%n0 = arith.muli %%tile, %%cBN : i32
    %%cpart = arith.constant %d : i32
    %%kstart = arith.muli %%part, %%cpart : i32
    %%kend = arith.addi %%kstart, %%cpart : i32
`, tiles, k/splits)},
		{"scf.for %k = %c0 to %cK step %cBK", "scf.for %k = %kstart to %kend step %cBK"},
		// r only in part 0: the others load zeros (0 + sum is sum exactly).
		{"    %rv = tt.load %rp : tensor<$BNx!tt.ptr<f32>>\n", `    %first = arith.cmpi eq, %part, %c0 : i32
    %firsts = tt.splat %first : i1 -> tensor<$BNxi1>
    %rzero = arith.constant dense<0.000000e+00> : tensor<$BNxf32>
    %rv = tt.load %rp, %firsts, %rzero : tensor<$BNx!tt.ptr<f32>>
`},
		// Row part of y.
		{"    %yp = tt.addptr %ybase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>\n", fmt.Sprintf(`    %%cn = arith.constant %d : i32
    %%yrow = arith.muli %%part, %%cn : i32
    %%yrows = tt.splat %%yrow : i32 -> tensor<$BNxi32>
    %%yoff = arith.addi %%yrows, %%rows : tensor<$BNxi32>
    %%yp = tt.addptr %%ybase, %%yoff : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
`, n)},
	} {
		if strings.Count(text, r.old) != 1 {
			return "", fmt.Errorf("triton: GEMV with SwiGLU split: the kernel's text changed (%q)", strings.TrimSpace(r.old))
		}
		text = strings.Replace(text, r.old, r.new, 1)
	}
	return rowKernel(text, k, t, w.dtype()), nil
}
