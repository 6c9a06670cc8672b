package triton

import (
	"fmt"
	"math"
	"strings"
)

// Norm is the RMSNorm that GEMVNormTTIR's kernel folds into its product: each row's
// 1/rms is rsqrt(Σx²·InvK + Eps), the float32 constants of the graph it replaces. With
// Before, the 1/rms scales x before the product, as model does for quantized layers
// (their input normalised: bf16(bf16(x·1/rms)·g)), rather than the product's output.
type Norm struct {
	InvK, Eps float32
	Before    bool
}

// GEMVNormTTIR is the TTIR module of the kernel @gemm_norm: for one float32 row x [k],
// the norm weight g [k] bfloat16 and W [n, k] as w says, y[n0:n0+bn] = (bf16(bf16(x)·g)
// · W[n0:n0+bn, :]ᵀ) · rsqrt(Σx²·InvK + Eps), float32 (the product times W's row
// scales s first, with w.Scaled; with norm.Before, bf16(bf16(x·rsqrt(…))·g) ·
// W[n0:n0+bn, :]ᵀ), its arguments x, g, W, (s,) y in that order. That is model's dense
// layer after an RMSNorm (internal/modelcore/forward.go: the row's 1/rms on the product's output,
// the input x·weight rounded to bfloat16 as the graph rounds it), with the norm's
// reduction, its product by the weight and the rounding done as each program loads x:
// every program reads all of x anyway, so the norm's own kernel goes. With norm.Before
// each program sums x's squares in a loop of its own first (x is read twice). It runs
// n/bn programs of GEMVTTIR's 1-row loop, Stages deep. x, g and the squares are [1, bk]
// tiles, as W's broadcast takes them (faster than x [bk] with its squares summed apart).
func GEMVNormTTIR(n, k int, t Tile, norm Norm, w Weight) (string, error) {
	if err := checkRowTile("GEMV with a norm", 1, n, k, t); err != nil {
		return "", err
	}
	// The loop's state: W's accumulator, and the squares unless summed before it; xStep
	// is the loop's work on x before its rounding: its squares, or its normalisation.
	state, args, types, yield, xStep, scaled := "%loop:2", "%a = %zero, %q = %zerok", "tensor<$BNx$BKxf32>, tensor<1x$BKxf32>",
		"%a1, %q1 : tensor<$BNx$BKxf32>, tensor<1x$BKxf32>", `      %xx = arith.mulf %xv, %xv : tensor<1x$BKxf32>
      %q1 = arith.addf %q, %xx : tensor<1x$BKxf32>
`, "%xv"
	prologue, epilogue := "", sumTile("%loop#0", w)+invRMS("%loop#1", "$BK")+`    %invs = tt.broadcast %iv : tensor<1xf32> -> tensor<$BNxf32>
    %yv = arith.mulf %sum, %invs : tensor<$BNxf32>
`+storeRows("%yv")
	if norm.Before {
		state, args, types, yield, xStep, scaled = "%loop", "%a = %zero", "tensor<$BNx$BKxf32>", "%a1 : tensor<$BNx$BKxf32>",
			"      %xs = arith.mulf %xv, %ivk : tensor<1x$BKxf32>\n", "%xs"
		prologue = `    %sq = scf.for %kq = %c0 to %cK step %cBK iter_args(%q = %zerok) -> (tensor<1x$BKxf32>) : i32 {
      %kxq = tt.splat %kq : i32 -> tensor<1x$BKxi32>
      %xkq = tt.addptr %xp0, %kxq : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %xq = tt.load %xkq : tensor<1x$BKx!tt.ptr<f32>>
      %xxq = arith.mulf %xq, %xq : tensor<1x$BKxf32>
      %q1 = arith.addf %q, %xxq : tensor<1x$BKxf32>
      scf.yield %q1 : tensor<1x$BKxf32>
    }
` + invRMS("%sq", "$BK") + `    %iv2 = tt.expand_dims %iv {axis = 1 : i32} : tensor<1xf32> -> tensor<1x1xf32>
    %ivk = tt.broadcast %iv2 : tensor<1x1xf32> -> tensor<1x$BKxf32>
`
		epilogue = sumTile("%loop", w) + storeRows("%sum")
	}
	text := `module {
  tt.func public @gemm_norm(%x: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<$WT> {tt.divisibility = 16 : i32}, ` + w.scaleArg() + `%y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + programStart + rowTile + `    %xbase = tt.splat %x : !tt.ptr<f32> -> tensor<1x$BKx!tt.ptr<f32>>
    %xp0 = tt.addptr %xbase, %rk2 : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %gbase = tt.splat %g : !tt.ptr<bf16> -> tensor<1x$BKx!tt.ptr<bf16>>
    %gp0 = tt.addptr %gbase, %rk2 : tensor<1x$BKx!tt.ptr<bf16>>, tensor<1x$BKxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    %zerok = arith.constant dense<0.000000e+00> : tensor<1x$BKxf32>
` + prologue + `    ` + state + ` = scf.for %k = %c0 to %cK step %cBK iter_args(` + args + `) -> (` + types + `) : i32 {
` + wTile + `      %kx = tt.splat %k : i32 -> tensor<1x$BKxi32>
      %xk = tt.addptr %xp0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %xv = tt.load %xk : tensor<1x$BKx!tt.ptr<f32>>
      %gk = tt.addptr %gp0, %kx : tensor<1x$BKx!tt.ptr<bf16>>, tensor<1x$BKxi32>
      %gv = tt.load %gk : tensor<1x$BKx!tt.ptr<bf16>>
` + xStep + `      %xb = arith.truncf ` + scaled + ` : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %xbf = arith.extf %xb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %gf = arith.extf %gv : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xg = arith.mulf %xbf, %gf : tensor<1x$BKxf32>
      %xgb = arith.truncf %xg : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %xgf = arith.extf %xgb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xbb = tt.broadcast %xgf : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p = arith.mulf %wf, %xbb : tensor<$BNx$BKxf32>
      %a1 = arith.addf %a, %p : tensor<$BNx$BKxf32>
      scf.yield ` + yield + `
    }$LOOPATTR
` + launchMark + epilogue
	return rowKernel(text, k, t, w.dtype(), "$INVK", f32Literal(norm.InvK), "$EPS", f32Literal(norm.Eps)), nil
}

// invRMS is a row's 1/rms %iv [1] from its squares [1, width] (in tiles, summed
// whole): rsqrt(Σ·$INVK + $EPS), Norm's formula, in both norm kernels.
func invRMS(squares, width string) string {
	return `    %ss = "tt.reduce"(` + squares + `) <{axis = 1 : i32}> ({
    ^bb0(%l2: f32, %r2: f32):
      %t2 = arith.addf %l2, %r2 : f32
      tt.reduce.return %t2 : f32
    }) : (tensor<1x` + width + `xf32>) -> tensor<1xf32>
    %cInvK = arith.constant $INVK : f32
    %cEps = arith.constant $EPS : f32
    %invKs = tt.splat %cInvK : f32 -> tensor<1xf32>
    %epss = tt.splat %cEps : f32 -> tensor<1xf32>
    %mean = arith.mulf %ss, %invKs : tensor<1xf32>
    %var = arith.addf %mean, %epss : tensor<1xf32>
    %iv = math.rsqrt %var : tensor<1xf32>
`
}

// f32Literal writes x as an MLIR float literal of its exact bits (hexadecimal).
func f32Literal(x float32) string { return fmt.Sprintf("0x%08X", math.Float32bits(x)) }

// RowNorm is the shape of RowNormTTIR's kernel: M rows x of K float32 values, each the
// sum of two addends where Sum is set, and the RMSNorm Norm of each.
type RowNorm struct {
	M, K int
	Sum  bool
	Norm
}

// maxRowNormK bounds K: a program holds its whole row, K rounded up to a power of two,
// in registers (32 float32 values a thread at 4 warps).
const maxRowNormK = 4096

// padded is K rounded up to a power of two, the row's tile.
func (r RowNorm) padded() int { return powerOfTwoAtLeast(r.K) }

// CheckRowNorm says why RowNormTTIR cannot write r's kernel, nil if it can.
func CheckRowNorm(r RowNorm) error {
	if r.M < 1 || r.K < 1 || r.K > maxRowNormK || int64(r.M)*int64(r.padded()) > math.MaxInt32 {
		return fmt.Errorf("triton: norm of %d rows of %d: want rows of 1 to %d values and int32 offsets", r.M, r.K, maxRowNormK)
	}
	return nil
}

// RowNormTTIR is the TTIR module of the kernel @norm, model's RMSNorm before a dense
// layer of several rows (internal/modelcore/forward.go) as one kernel where XLA runs two or three
// (the residual add, the row's mean of squares and 1/rms, x·weight). Program r reads row r of x, or of a and b and then stores their sum
// x = a + b in s (with r.Sum), and stores inv[r] = rsqrt(Σx²·InvK + Eps) and
// xg[r] = bf16(bf16(x)·g) for the norm weight g [K] bfloat16, as the graph rounds them:
// its product by W then takes xg, and its output is scaled by inv. With r.Before, xg[r]
// is the normalised row bf16(bf16(x·inv[r])·g) of a quantized layer's input instead, and
// the product's output is not scaled. The arguments are a, b (with Sum), g, s (with
// Sum), xg and inv, in that order.
func RowNormTTIR(r RowNorm) (string, error) {
	if err := CheckRowNorm(r); err != nil {
		return "", err
	}
	text := `module {
  tt.func public @norm(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32}, $BARG%g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, $SARG%xg: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %inv: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + waitMark + `    %row = tt.get_program_id x : i32
    %cK = arith.constant $K : i32
    %off = arith.muli %row, %cK : i32
    %rk = tt.make_range {end = $P : i32, start = 0 : i32} : tensor<$Pxi32>
    %rk2 = tt.expand_dims %rk {axis = 0 : i32} : tensor<$Pxi32> -> tensor<1x$Pxi32>
    %Ks = arith.constant dense<$K> : tensor<1x$Pxi32>
    %in = arith.cmpi slt, %rk2, %Ks : tensor<1x$Pxi32>
    %offs = tt.splat %off : i32 -> tensor<1x$Pxi32>
    %ro = arith.addi %offs, %rk2 : tensor<1x$Pxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<1x$Pxf32>
    %abase = tt.splat %a : !tt.ptr<f32> -> tensor<1x$Px!tt.ptr<f32>>
    %ap = tt.addptr %abase, %ro : tensor<1x$Px!tt.ptr<f32>>, tensor<1x$Pxi32>
    %av = tt.load %ap, %in, %zero : tensor<1x$Px!tt.ptr<f32>>
    %gbase = tt.splat %g : !tt.ptr<bf16> -> tensor<1x$Px!tt.ptr<bf16>>
    %gp = tt.addptr %gbase, %rk2 : tensor<1x$Px!tt.ptr<bf16>>, tensor<1x$Pxi32>
    %gzero = arith.constant dense<0.000000e+00> : tensor<1x$Pxbf16>
    %gv = tt.load %gp, %in, %gzero : tensor<1x$Px!tt.ptr<bf16>>
$SUM    %xx = arith.mulf $X, $X : tensor<1x$Pxf32>
` + invRMS("%xx", "$P") + `    %ibase = tt.splat %inv : !tt.ptr<f32> -> tensor<1x!tt.ptr<f32>>
    %rows = tt.splat %row : i32 -> tensor<1xi32>
    %ip = tt.addptr %ibase, %rows : tensor<1x!tt.ptr<f32>>, tensor<1xi32>
    tt.store %ip, %iv : tensor<1x!tt.ptr<f32>>
$NORMED    %xb = arith.truncf $XN : tensor<1x$Pxf32> to tensor<1x$Pxbf16>
    %xbf = arith.extf %xb : tensor<1x$Pxbf16> to tensor<1x$Pxf32>
    %gf = arith.extf %gv : tensor<1x$Pxbf16> to tensor<1x$Pxf32>
    %xgf = arith.mulf %xbf, %gf : tensor<1x$Pxf32>
    %xgb = arith.truncf %xgf : tensor<1x$Pxf32> to tensor<1x$Pxbf16>
    %xgbase = tt.splat %xg : !tt.ptr<bf16> -> tensor<1x$Px!tt.ptr<bf16>>
    %xgp = tt.addptr %xgbase, %ro : tensor<1x$Px!tt.ptr<bf16>>, tensor<1x$Pxi32>
    tt.store %xgp, %xgb, %in : tensor<1x$Px!tt.ptr<bf16>>
` + launchMark + `    tt.return
  }
}
`
	bArg, sArg, sum, x := "", "", "", "%av"
	if r.Sum {
		bArg = "%b: !tt.ptr<f32> {tt.divisibility = 16 : i32}, "
		sArg = "%s: !tt.ptr<f32> {tt.divisibility = 16 : i32}, "
		sum, x = rowSum, "%x"
	}
	normed, xn := "", x
	if r.Before {
		normed, xn = `    %iv2 = tt.expand_dims %iv {axis = 1 : i32} : tensor<1xf32> -> tensor<1x1xf32>
    %ivb = tt.broadcast %iv2 : tensor<1x1xf32> -> tensor<1x$Pxf32>
    %xs = arith.mulf `+x+`, %ivb : tensor<1x$Pxf32>
`, "%xs"
	}
	text = strings.NewReplacer("$BARG", bArg, "$SARG", sArg, "$SUM", sum, "$NORMED", normed, "$XN", xn, "$X", x).Replace(text)
	return strings.NewReplacer("$K", fmt.Sprint(r.K), "$P", fmt.Sprint(r.padded()), "$INVK", f32Literal(r.InvK),
		"$EPS", f32Literal(r.Eps)).Replace(text), nil
}

// rowSum is RowNormTTIR's sum of the row's addends, %x = a + b, stored in s.
const rowSum = `    %bbase = tt.splat %b : !tt.ptr<f32> -> tensor<1x$Px!tt.ptr<f32>>
    %bp = tt.addptr %bbase, %ro : tensor<1x$Px!tt.ptr<f32>>, tensor<1x$Pxi32>
    %bv = tt.load %bp, %in, %zero : tensor<1x$Px!tt.ptr<f32>>
    %x = arith.addf %av, %bv : tensor<1x$Pxf32>
    %sbase = tt.splat %s : !tt.ptr<f32> -> tensor<1x$Px!tt.ptr<f32>>
    %sp = tt.addptr %sbase, %ro : tensor<1x$Px!tt.ptr<f32>>, tensor<1x$Pxi32>
    tt.store %sp, %x, %in : tensor<1x$Px!tt.ptr<f32>>
`
