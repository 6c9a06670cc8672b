package triton

import (
	"fmt"
	"math"
)

// Norm is the RMSNorm that GEMVNormTTIR's kernel folds into its product: each row's
// 1/rms is rsqrt(Σx²·InvK + Eps), the float32 constants of the graph it replaces.
type Norm struct {
	InvK, Eps float32
}

// GEMVNormTTIR is the TTIR module of the kernel @gemm_norm: for one float32 row x [k],
// the norm weight g [k] and W [n, k] bfloat16, y[n0:n0+bn] = (bf16(bf16(x)·g) ·
// W[n0:n0+bn, :]ᵀ) · rsqrt(Σx²·InvK + Eps), float32, its arguments x, g, W and y in
// that order. That is model's dense layer after an RMSNorm (model/forward.go: the row's
// 1/rms on the product's output, the input x·weight rounded to bfloat16 as the graph
// rounds it), with the norm's reduction, its product by the weight and the rounding
// done as each program loads x: every program reads all of x anyway, so the norm's
// own kernel goes. It runs n/bn programs of GEMVTTIR's 1-row loop, Stages deep. x, g
// and the squares are [1, bk] tiles, as W's broadcast takes them: with x [bk] and its
// squares summed apart, gate/up's kernel took 17.3 µs, with these tiles 15.7 µs
// (BENCHMARKS.md, runs CJ and CK).
func GEMVNormTTIR(n, k int, t Tile, norm Norm) (string, error) {
	if err := checkRowTile("GEMV with a norm", 1, n, k, t); err != nil {
		return "", err
	}
	text := `module {
  tt.func public @gemm_norm(%x: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + programStart + rowTile + `    %xbase = tt.splat %x : !tt.ptr<f32> -> tensor<1x$BKx!tt.ptr<f32>>
    %xp0 = tt.addptr %xbase, %rk2 : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %gbase = tt.splat %g : !tt.ptr<bf16> -> tensor<1x$BKx!tt.ptr<bf16>>
    %gp0 = tt.addptr %gbase, %rk2 : tensor<1x$BKx!tt.ptr<bf16>>, tensor<1x$BKxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    %zerok = arith.constant dense<0.000000e+00> : tensor<1x$BKxf32>
    %loop:2 = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero, %q = %zerok) -> (tensor<$BNx$BKxf32>, tensor<1x$BKxf32>) : i32 {
` + wTile + `      %kx = tt.splat %k : i32 -> tensor<1x$BKxi32>
      %xk = tt.addptr %xp0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %xv = tt.load %xk : tensor<1x$BKx!tt.ptr<f32>>
      %gk = tt.addptr %gp0, %kx : tensor<1x$BKx!tt.ptr<bf16>>, tensor<1x$BKxi32>
      %gv = tt.load %gk : tensor<1x$BKx!tt.ptr<bf16>>
      %xx = arith.mulf %xv, %xv : tensor<1x$BKxf32>
      %q1 = arith.addf %q, %xx : tensor<1x$BKxf32>
      %xb = arith.truncf %xv : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %xbf = arith.extf %xb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %gf = arith.extf %gv : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xg = arith.mulf %xbf, %gf : tensor<1x$BKxf32>
      %xgb = arith.truncf %xg : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %xgf = arith.extf %xgb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xbb = tt.broadcast %xgf : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p = arith.mulf %wf, %xbb : tensor<$BNx$BKxf32>
      %a1 = arith.addf %a, %p : tensor<$BNx$BKxf32>
      scf.yield %a1, %q1 : tensor<$BNx$BKxf32>, tensor<1x$BKxf32>
    }$LOOPATTR
` + launchMark + `` + sumTile("%loop#0") + `    %ss = "tt.reduce"(%loop#1) <{axis = 1 : i32}> ({
    ^bb0(%l2: f32, %r2: f32):
      %t2 = arith.addf %l2, %r2 : f32
      tt.reduce.return %t2 : f32
    }) : (tensor<1x$BKxf32>) -> tensor<1xf32>
    %cInvK = arith.constant $INVK : f32
    %cEps = arith.constant $EPS : f32
    %invKs = tt.splat %cInvK : f32 -> tensor<1xf32>
    %epss = tt.splat %cEps : f32 -> tensor<1xf32>
    %mean = arith.mulf %ss, %invKs : tensor<1xf32>
    %var = arith.addf %mean, %epss : tensor<1xf32>
    %inv = math.rsqrt %var : tensor<1xf32>
    %invs = tt.broadcast %inv : tensor<1xf32> -> tensor<$BNxf32>
    %yv = arith.mulf %sum, %invs : tensor<$BNxf32>
` + storeRows("%yv")
	return rowKernel(text, k, t, "$INVK", f32Literal(norm.InvK), "$EPS", f32Literal(norm.Eps)), nil
}

// f32Literal writes x as an MLIR float literal of its exact bits (hexadecimal).
func f32Literal(x float32) string { return fmt.Sprintf("0x%08X", math.Float32bits(x)) }
