package triton

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
)

// Warps is the number of warps of every program (CTA) of our kernels.
const Warps = 4

// MaxAccumulators is the most float32 accumulators per thread a GEMV tile may hold
// (Tile.Accumulators): beyond it registers spill.
const MaxAccumulators = 64

// Tile is how the GEMV splits its work: each program computes BN outputs of every row,
// in K steps of BK; Stages > 1 pipelines the loads of the K loop that many steps deep.
type Tile struct{ BN, BK, Stages int }

// String writes t as "8x512/s3".
func (t Tile) String() string { return fmt.Sprintf("%dx%d/s%d", t.BN, t.BK, t.Stages) }

// Accumulators is how many float32 accumulators each thread holds at m rows: one
// [BN, BK] accumulator per row, spread over the program's 32 × Warps threads.
func (t Tile) Accumulators(m int) int { return m * t.BN * t.BK / (32 * Warps) }

// CheckGEMV says why GEMVTTIR cannot write the kernel of m rows, W [n, k], tile t and
// output dtype out, or returns nil: the tile's sides must be powers of two (Triton's
// tensors) dividing n and k, it must fit MaxAccumulators at m rows, the offsets must fit
// int32, and out must be bfloat16 or float32.
func CheckGEMV(m, n, k int, t Tile, out dtypes.DType) error {
	var errs []error
	if m < 1 || n < 1 || k < 1 {
		errs = append(errs, fmt.Errorf("dimensions m=%d, n=%d, k=%d must be positive", m, n, k))
	}
	if !isPowerOfTwo(t.BN) || !isPowerOfTwo(t.BK) || t.Stages < 1 {
		errs = append(errs, fmt.Errorf("tile %v: its sides must be powers of two and its stages positive", t))
	} else if n%t.BN != 0 || k%t.BK != 0 {
		errs = append(errs, fmt.Errorf("tile %v does not divide W [%d, %d]", t, n, k))
	}
	if a := t.Accumulators(m); a > MaxAccumulators {
		errs = append(errs, fmt.Errorf("tile %v at %d rows holds %d accumulators per thread, over %d", t, m, a, MaxAccumulators))
	}
	if int64(max(m, n))*int64(k) > math.MaxInt32 || int64(m)*int64(n) > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("x [%d, %d], W [%d, %d] or y is too large for int32 offsets", m, k, n, k))
	}
	if out != dtypes.BFloat16 && out != dtypes.Float32 {
		errs = append(errs, fmt.Errorf("output dtype %s: only bfloat16 and float32", out))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("triton: GEMV: %w", err)
	}
	return nil
}

func isPowerOfTwo(x int) bool { return x > 0 && x&(x-1) == 0 }

// elementType is dtype's TTIR name.
func elementType(dtype dtypes.DType) string {
	if dtype == dtypes.Float32 {
		return "f32"
	}
	return "bf16"
}

// GEMVTTIR is the TTIR module of the kernel @gemm: y[:, n0:n0+bn] = x·W[n0:n0+bn, :]ᵀ for
// its program's n0, with W [n, k] and x [m, k] bfloat16 row-major and y [m, n] of dtype
// out, its arguments x, W and y in that order. It is a 1-row kernel with its work
// written out once per row of x: each K step loads the [bn, bk] W tile once and
// multiplies it into one [bn, bk] float32 accumulator per row, reduced over K at the
// end; a bfloat16 y rounds the sums (arith.truncf), a float32 y stores them. A tile of
// Stages > 1 marks the K loop with tt.num_stages: without it, Triton pipelines no load
// of a loop that has no tt.dot. It runs n/bn programs (GEMV's grid); see CheckGEMV for
// what it needs.
func GEMVTTIR(m, n, k int, t Tile, out dtypes.DType) (string, error) {
	if err := CheckGEMV(m, n, k, t, out); err != nil {
		return "", err
	}
	var b strings.Builder
	// perRow appends text once per row of x: $m is the row, $xoff and $yoff the
	// offsets of its x and y rows, $acc its accumulator after the loop.
	perRow := func(text string) {
		for i := range m {
			acc := fmt.Sprintf("%%acc#%d", i)
			if m == 1 {
				acc = "%acc"
			}
			b.WriteString(strings.NewReplacer("$m", fmt.Sprint(i), "$xoff", fmt.Sprint(i*k),
				"$yoff", fmt.Sprint(i*n), "$acc", acc).Replace(text))
		}
	}
	// rowList joins format over the rows, %d the row.
	rowList := func(format string) string {
		items := make([]string, m)
		for i := range items {
			items[i] = fmt.Sprintf(format, i)
		}
		return strings.Join(items, ", ")
	}
	accs := "%acc"
	if m > 1 {
		accs = fmt.Sprintf("%%acc:%d", m)
	}
	loopAttr := ""
	if t.Stages > 1 {
		loopAttr = fmt.Sprintf(" {tt.num_stages = %d : i32}", t.Stages)
	}
	accType := fmt.Sprintf("tensor<%dx%dxf32>", t.BN, t.BK)
	// A bfloat16 y stores the rounded sums %yt, a float32 y the sums themselves.
	round, stored := "", "%sum$m"
	if out == dtypes.BFloat16 {
		round, stored = "    %yt$m = arith.truncf %sum$m : tensor<$BNxf32> to tensor<$BNxbf16>\n", "%yt$m"
	}

	b.WriteString(`module {
  tt.func public @gemm(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %y: !tt.ptr<$YT> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0 = arith.constant 0 : i32
    %cK = arith.constant $K : i32
    %cBK = arith.constant $BK : i32
    %cBN = arith.constant $BN : i32
    %pid = tt.get_program_id x : i32
    %n0 = arith.muli %pid, %cBN : i32
    %rn = tt.make_range {end = $BN : i32, start = 0 : i32} : tensor<$BNxi32>
    %n0s = tt.splat %n0 : i32 -> tensor<$BNxi32>
    %rows = arith.addi %n0s, %rn : tensor<$BNxi32>
    %Ks = tt.splat %cK : i32 -> tensor<$BNxi32>
    %rowoff = arith.muli %rows, %Ks : tensor<$BNxi32>
    %rowoff2 = tt.expand_dims %rowoff {axis = 1 : i32} : tensor<$BNxi32> -> tensor<$BNx1xi32>
    %rowoffb = tt.broadcast %rowoff2 : tensor<$BNx1xi32> -> tensor<$BNx$BKxi32>
    %rk = tt.make_range {end = $BK : i32, start = 0 : i32} : tensor<$BKxi32>
    %rk2 = tt.expand_dims %rk {axis = 0 : i32} : tensor<$BKxi32> -> tensor<1x$BKxi32>
    %rkb = tt.broadcast %rk2 : tensor<1x$BKxi32> -> tensor<$BNx$BKxi32>
    %woff = arith.addi %rowoffb, %rkb : tensor<$BNx$BKxi32>
    %wbase = tt.splat %w : !tt.ptr<bf16> -> tensor<$BNx$BKx!tt.ptr<bf16>>
    %wp0 = tt.addptr %wbase, %woff : tensor<$BNx$BKx!tt.ptr<bf16>>, tensor<$BNx$BKxi32>
    %xbase = tt.splat %x : !tt.ptr<bf16> -> tensor<$BKx!tt.ptr<bf16>>
    %xp0 = tt.addptr %xbase, %rk : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
`)
	perRow(`    %xo$m = arith.constant dense<$xoff> : tensor<$BKxi32>
    %xrow$m = tt.addptr %xp0, %xo$m : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
`)
	b.WriteString(`    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    $ACCS = scf.for %k = %c0 to %cK step %cBK iter_args($ITERARGS) -> ($TYPES) : i32 {
      %kw = tt.splat %k : i32 -> tensor<$BNx$BKxi32>
      %wp = tt.addptr %wp0, %kw : tensor<$BNx$BKx!tt.ptr<bf16>>, tensor<$BNx$BKxi32>
      %wv = tt.load %wp : tensor<$BNx$BKx!tt.ptr<bf16>>
      %wf = arith.extf %wv : tensor<$BNx$BKxbf16> to tensor<$BNx$BKxf32>
      %kx = tt.splat %k : i32 -> tensor<$BKxi32>
`)
	perRow(`      %xk$m = tt.addptr %xrow$m, %kx : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
      %xv$m = tt.load %xk$m : tensor<$BKx!tt.ptr<bf16>>
      %xf$m = arith.extf %xv$m : tensor<$BKxbf16> to tensor<$BKxf32>
      %xe$m = tt.expand_dims %xf$m {axis = 0 : i32} : tensor<$BKxf32> -> tensor<1x$BKxf32>
      %xb$m = tt.broadcast %xe$m : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p$m = arith.mulf %wf, %xb$m : tensor<$BNx$BKxf32>
      %s$m = arith.addf %a$m, %p$m : tensor<$BNx$BKxf32>
`)
	b.WriteString(`      scf.yield $YIELDS : $TYPES
    }$LOOPATTR
    %ybase = tt.splat %y : !tt.ptr<$YT> -> tensor<$BNx!tt.ptr<$YT>>
`)
	perRow(`    %sum$m = "tt.reduce"($acc) <{axis = 1 : i32}> ({
    ^bb0(%l$m: f32, %r$m: f32):
      %t$m = arith.addf %l$m, %r$m : f32
      tt.reduce.return %t$m : f32
    }) : (tensor<$BNx$BKxf32>) -> tensor<$BNxf32>
` + round + `    %yo$m = arith.constant dense<$yoff> : tensor<$BNxi32>
    %yr$m = arith.addi %rows, %yo$m : tensor<$BNxi32>
    %yp$m = tt.addptr %ybase, %yr$m : tensor<$BNx!tt.ptr<$YT>>, tensor<$BNxi32>
    tt.store %yp$m, ` + stored + ` : tensor<$BNx!tt.ptr<$YT>>
`)
	b.WriteString(`    tt.return
  }
}`)
	return strings.NewReplacer("$K", fmt.Sprint(k), "$BN", fmt.Sprint(t.BN), "$BK", fmt.Sprint(t.BK),
		"$ACCS", accs, "$ITERARGS", rowList("%%a%d = %%zero"), "$TYPES", strings.Join(slices.Repeat([]string{accType}, m), ", "),
		"$YIELDS", rowList("%%s%d"), "$LOOPATTR", loopAttr, "$YT", elementType(out)).Replace(b.String()), nil
}
