package triton

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
)

// Warps is the number of warps of every program (CTA) of our kernels but the GEMVs of
// tiles that set their own (Tile.Warps).
const Warps = 4

// MaxAccumulators is the most float32 accumulators per thread a GEMV tile may hold
// (Tile.Accumulators): beyond it registers spill.
const MaxAccumulators = 64

// Tile is how the GEMV splits its work: each program computes BN outputs of every row,
// in K steps of BK; Stages > 1 pipelines the loads of the K loop that many steps deep.
// Dot multiplies each step's x and W tiles on the tensor cores (tt.dot, x padded to
// DotRows rows, or BM where set: a power of two of at least DotRows, for more rows)
// instead of into one accumulator per row of x.
//
// A Dot tile's Split > 1 splits the K loop over that many programs per W tile, each
// storing its float32 partial sums to y [Split, m, n], which the caller adds up
// (split-K: more programs where W has too few rows to fill the device's SMs).
// Warps > 0 sets the warps of each program (0: the package's Warps).
type Tile struct {
	BM, BN, BK, Stages int
	Dot                bool
	Split              int
	Warps              int
}

// warps is the warps of each of t's programs: t.Warps, or the package's Warps.
func (t Tile) warps() int {
	if t.Warps > 0 {
		return t.Warps
	}
	return Warps
}

// DotRows is the rows of x a Dot tile's kernel multiplies, the smallest side tt.dot
// takes: rows past x's repeat its last one and are not stored.
const DotRows = 16

// String writes t as "8x512/s3", a Dot tile as "dot32x128/s3", one with BM as
// "dot64x32x128/s3".
func (t Tile) String() string {
	prefix := ""
	switch {
	case t.Dot && t.BM > 0:
		prefix = fmt.Sprintf("dot%dx", t.BM)
	case t.Dot:
		prefix = "dot"
	}
	suffix := ""
	if t.Split > 1 {
		suffix = fmt.Sprintf("/k%d", t.Split)
	}
	if t.Warps > 0 {
		suffix += fmt.Sprintf("/w%d", t.Warps)
	}
	return fmt.Sprintf("%s%dx%d/s%d%s", prefix, t.BN, t.BK, t.Stages, suffix)
}

// Programs is the grid of the GEMV of W [n, k] with tile t: n/BN programs, times Split.
func (t Tile) Programs(n int) int { return n / t.BN * max(1, t.Split) }

// dotRows is the rows of x a Dot tile's kernel multiplies: BM, or DotRows without it.
func (t Tile) dotRows() int { return max(t.BM, DotRows) }

// Accumulators is how many float32 accumulators each thread holds at m rows, spread
// over the program's 32 × Warps threads: one [BN, BK] accumulator per row, or a Dot
// tile's one [dotRows, BN] for all its rows.
func (t Tile) Accumulators(m int) int {
	if t.Dot {
		return t.dotRows() * t.BN / (32 * t.warps())
	}
	return m * t.BN * t.BK / (32 * t.warps())
}

// CheckGEMV says why GEMVTTIR cannot write the kernel of m rows, W [n, k], tile t and
// output dtype out, or returns nil: the tile's sides must be powers of two (Triton's
// tensors) dividing n and k, it must fit MaxAccumulators at m rows, the offsets must fit
// int32, and out must be bfloat16 or float32. A Dot tile also needs sides of at least
// 16 (tt.dot's smallest) and m ≤ DotRows, or ≤ BM where set; BM is a Dot tile's only, a
// power of two of at least DotRows.
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
	if t.Dot && (m > t.dotRows() || t.BN < 16 || t.BK < 16) {
		errs = append(errs, fmt.Errorf("tile %v at %d rows: a Dot tile needs at most %d rows and sides of at least 16", t, m, t.dotRows()))
	}
	if t.BM != 0 && (!t.Dot || !isPowerOfTwo(t.BM) || t.BM < DotRows) {
		errs = append(errs, fmt.Errorf("tile %v: BM must be a power of two of at least %d, of a Dot tile", t, DotRows))
	}
	if t.Split > 1 && (!t.Dot || t.BK <= 0 || k%(t.BK*t.Split) != 0 || out != dtypes.Float32) {
		errs = append(errs, fmt.Errorf("tile %v: a split K loop needs a Dot tile, K [%d] a multiple of BK × Split and float32 partial sums", t, k))
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

// powerOfTwoAtLeast is the smallest power of two of at least n (1 for n below 1): a
// Triton tensor's side holding n.
func powerOfTwoAtLeast(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// elementType is dtype's TTIR name: uint8 holds FP8 E4M3FN bytes.
func elementType(dtype dtypes.DType) string {
	switch dtype {
	case dtypes.Float32:
		return "f32"
	case dtypes.Uint8:
		return "f8E4M3FN"
	}
	return "bf16"
}

// weightToFloat32 converts a [BN, BK] tile %wv of W's element type to float32 %wf: FP8
// through float16, which holds every E4M3FN value exactly and which sm_89 and later
// convert to in one instruction per pair.
func weightToFloat32(w dtypes.DType) string {
	if w == dtypes.Uint8 {
		return `      %wh = tt.fp_to_fp %wv : tensor<$BNx$BKxf8E4M3FN> -> tensor<$BNx$BKxf16>
      %wf = arith.extf %wh : tensor<$BNx$BKxf16> to tensor<$BNx$BKxf32>
`
	}
	return "      %wf = arith.extf %wv : tensor<$BNx$BKxbf16> to tensor<$BNx$BKxf32>\n"
}

// GEMVTTIR is the TTIR module of the kernel @gemm: y[:, n0:n0+bn] = x·W[n0:n0+bn, :]ᵀ for
// its program's n0, with x [m, k] bfloat16 and W [n, k] of dtype w row-major, and y [m,
// n] of dtype out, its arguments x, W and y in that order. W is bfloat16, or uint8
// holding FP8 E4M3FN bytes, which the kernel reads as such: the product of x and the
// bytes' exact values, half the bytes of a bfloat16 W. It is a 1-row kernel with its
// work written out once per row of x: each K step loads the [bn, bk] W tile once and
// multiplies it into one [bn, bk] float32 accumulator per row, reduced over K at the
// end; a bfloat16 y rounds the sums (arith.truncf), a float32 y stores them. A tile of
// Stages > 1 marks the K loop with tt.num_stages: without it, Triton pipelines no load
// of a loop that has no tt.dot. It runs n/bn programs (GEMV's grid); see CheckGEMV for
// what it needs.
func GEMVTTIR(m, n, k int, t Tile, w, out dtypes.DType) (string, error) {
	if err := CheckGEMV(m, n, k, t, out); err != nil {
		return "", err
	}
	switch {
	case w != dtypes.BFloat16 && w != dtypes.Uint8:
		return "", fmt.Errorf("triton: GEMV: W of %s: only bfloat16, or uint8 holding FP8 E4M3FN bytes", w)
	case t.Dot:
		return dotTTIR(m, n, k, t, dtypes.BFloat16, w, out), nil
	}
	return rowsTTIR(m, n, k, t, Weight{FP8: w == dtypes.Uint8}, out, false), nil
}

// Weight is what a fold kernel's W holds (GEMVNormTTIR, GEMVResidualTTIR,
// GEMVSwiGLUResidualTTIR): bfloat16 values (the zero value), or FP8 E4M3FN bytes; with
// Scaled the kernel also takes s [n] float32, a scale per row of W, by which it
// multiplies each row's sum before the rest of its epilogue, as package quant's FP8
// layers scale their products (input scale × weight scale) before anything else.
type Weight struct {
	FP8, Scaled bool
}

// dtype is the element type of W's buffer: uint8 for FP8 bytes.
func (w Weight) dtype() dtypes.DType {
	if w.FP8 {
		return dtypes.Uint8
	}
	return dtypes.BFloat16
}

// scaleArg is the kernel argument %s before %y of a scaled W, else nothing.
func (w Weight) scaleArg() string {
	if w.Scaled {
		return "%s: !tt.ptr<f32> {tt.divisibility = 16 : i32}, "
	}
	return ""
}

// GEMVResidualTTIR is GEMVTTIR's kernel of a float32 y that adds the float32 residual
// r [m, n] to its sums: y = r + x·Wᵀ (r + (x·Wᵀ)·s with w.Scaled), its arguments x, W,
// r, (s,) y in that order. That is model's residual add after a dense layer, which
// then needs no kernel of its own.
func GEMVResidualTTIR(m, n, k int, t Tile, w Weight) (string, error) {
	if err := checkRowTile("GEMV with a residual", m, n, k, t); err != nil {
		return "", err
	}
	return rowsTTIR(m, n, k, t, w, dtypes.Float32, true), nil
}

// rowsTTIR writes GEMVTTIR's 1-row kernel of W w, adding the residual r when residual
// is set (GEMVResidualTTIR).
func rowsTTIR(m, n, k int, t Tile, w Weight, out dtypes.DType, residual bool) string {
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
	accType := fmt.Sprintf("tensor<%dx%dxf32>", t.BN, t.BK)
	// A bfloat16 y stores the rounded sums %yt, a float32 y the sums themselves.
	round, stored := "", "%sum$m"
	if out == dtypes.BFloat16 {
		round, stored = "    %yt$m = arith.truncf %sum$m : tensor<$BNxf32> to tensor<$BNxbf16>\n", "%yt$m"
	}
	head := kernelHead
	if residual {
		head = strings.Replace(head, "%y: !tt.ptr<$YT>", "%r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<$YT>", 1)
	}
	head = strings.Replace(head, "%y: !tt.ptr<$YT>", w.scaleArg()+"%y: !tt.ptr<$YT>", 1)

	b.WriteString(head + rowTile + `    %xbase = tt.splat %x : !tt.ptr<bf16> -> tensor<$BKx!tt.ptr<bf16>>
    %xp0 = tt.addptr %xbase, %rk : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
`)
	perRow(`    %xo$m = arith.constant dense<$xoff> : tensor<$BKxi32>
    %xrow$m = tt.addptr %xp0, %xo$m : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
`)
	b.WriteString(`    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    $ACCS = scf.for %k = %c0 to %cK step %cBK iter_args($ITERARGS) -> ($TYPES) : i32 {
` + wTile + `      %kx = tt.splat %k : i32 -> tensor<$BKxi32>
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
` + launchMark + `    %ybase = tt.splat %y : !tt.ptr<$YT> -> tensor<$BNx!tt.ptr<$YT>>
`)
	// addResidual loads r's row at the offsets of y's and adds it to the sums.
	addResidual := ""
	if residual {
		b.WriteString("    %rbase = tt.splat %r : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>\n")
		addResidual = `    %rp$m = tt.addptr %rbase, %yr$m : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    %rv$m = tt.load %rp$m : tensor<$BNx!tt.ptr<f32>>
    %res$m = arith.addf %rv$m, %sum$m : tensor<$BNxf32>
`
		stored = "%res$m"
	}
	// scale multiplies a scaled W's sums by its row scales %sv.
	sum, scale := "%sum$m", ""
	if w.Scaled {
		b.WriteString(rowScales)
		sum, scale = "%raw$m", "    %sum$m = arith.mulf %raw$m, %sv : tensor<$BNxf32>\n"
	}
	perRow(`    ` + sum + ` = "tt.reduce"($acc) <{axis = 1 : i32}> ({
    ^bb0(%l$m: f32, %r$m: f32):
      %t$m = arith.addf %l$m, %r$m : f32
      tt.reduce.return %t$m : f32
    }) : (tensor<$BNx$BKxf32>) -> tensor<$BNxf32>
` + scale + round + `    %yo$m = arith.constant dense<$yoff> : tensor<$BNxi32>
    %yr$m = arith.addi %rows, %yo$m : tensor<$BNxi32>
` + addResidual + `    %yp$m = tt.addptr %ybase, %yr$m : tensor<$BNx!tt.ptr<$YT>>, tensor<$BNxi32>
    tt.store %yp$m, ` + stored + ` : tensor<$BNx!tt.ptr<$YT>>
`)
	b.WriteString(`    tt.return
  }
}`)
	return rowKernel(b.String(), k, t, w.dtype(), "$ACCS", accs, "$ITERARGS", rowList("%%a%d = %%zero"),
		"$TYPES", strings.Join(slices.Repeat([]string{accType}, m), ", "), "$YIELDS", rowList("%%s%d"),
		"$YT", elementType(out))
}

// kernelHead opens both GEMV kernels: the function @gemm(x, W, y) (W of element type
// $WT, y of $YT), then programStart.
const kernelHead = `module {
  tt.func public @gemm(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<$WT> {tt.divisibility = 16 : i32}, %y: !tt.ptr<$YT> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + programStart

// programStart follows the signature of every GEMV kernel: its wait mark, the constants
// of its K loop and its program's offset %n0 into W's rows.
const programStart = waitMark + `    %c0 = arith.constant 0 : i32
    %cK = arith.constant $K : i32
    %cBK = arith.constant $BK : i32
    %cBN = arith.constant $BN : i32
    %pid = tt.get_program_id x : i32
    %n0 = arith.muli %pid, %cBN : i32
`

// checkRowTile says why a GEMV kernel of m rows and W [n, k] that only has the 1-row
// loop (what names it in the error) cannot take tile t with a float32 output, or
// returns nil.
func checkRowTile(what string, m, n, k int, t Tile) error {
	if t.Dot {
		return fmt.Errorf("triton: %s: tile %v: only 1-row tiles", what, t)
	}
	return CheckGEMV(m, n, k, t, dtypes.Float32)
}

// rowTile follows the program offset %n0 in every 1-row kernel: its rows %rows of W
// (of element type $WT) and the pointers %wp0 to their first [BN, BK] tile, with %rk
// the K offsets 0..BK-1 ([BK]; %rk2 the same as [1, BK]).
const rowTile = `    %rn = tt.make_range {end = $BN : i32, start = 0 : i32} : tensor<$BNxi32>
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
    %wbase = tt.splat %w : !tt.ptr<$WT> -> tensor<$BNx$BKx!tt.ptr<$WT>>
    %wp0 = tt.addptr %wbase, %woff : tensor<$BNx$BKx!tt.ptr<$WT>>, tensor<$BNx$BKxi32>
`

// wTile opens the K loop of every 1-row kernel: W's [BN, BK] tile of step %k, as
// float32 %wf ($WF, weightToFloat32).
const wTile = `      %kw = tt.splat %k : i32 -> tensor<$BNx$BKxi32>
      %wp = tt.addptr %wp0, %kw : tensor<$BNx$BKx!tt.ptr<$WT>>, tensor<$BNx$BKxi32>
      %wv = tt.load %wp : tensor<$BNx$BKx!tt.ptr<$WT>>
$WF`

// sumTile reduces a 1-row kernel's accumulator acc [BN, BK] after its K loop to its
// rows' sums %sum [BN], times their scales s of a scaled W.
func sumTile(acc string, w Weight) string {
	sum := "%sum"
	if w.Scaled {
		sum = "%raw"
	}
	text := `    ` + sum + ` = "tt.reduce"(` + acc + `) <{axis = 1 : i32}> ({
    ^bb0(%l: f32, %rr: f32):
      %t = arith.addf %l, %rr : f32
      tt.reduce.return %t : f32
    }) : (tensor<$BNx$BKxf32>) -> tensor<$BNxf32>
`
	if w.Scaled {
		text += rowScales + "    %sum = arith.mulf %raw, %sv : tensor<$BNxf32>\n"
	}
	return text
}

// rowScales loads a scaled W's scales %sv [BN] of the program's rows %rows from s.
const rowScales = `    %sbase = tt.splat %s : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>
    %sp = tt.addptr %sbase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    %sv = tt.load %sp : tensor<$BNx!tt.ptr<f32>>
`

// storeRows ends a 1-row kernel of a float32 y: it stores y [BN] at its rows of y.
func storeRows(y string) string {
	return `    %ybase = tt.splat %y : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>
    %yp = tt.addptr %ybase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    tt.store %yp, ` + y + ` : tensor<$BNx!tt.ptr<f32>>
    tt.return
  }
}`
}

// rowKernel fills in the text of a 1-row kernel of W [n, k] of dtype w and tile t:
// $WF (first: it holds the others), $WT, $K, $BN, $BK and $LOOPATTR, then each pair of
// extra (placeholder, value).
func rowKernel(text string, k int, t Tile, w dtypes.DType, extra ...string) string {
	text = strings.ReplaceAll(text, "$WF", weightToFloat32(w))
	pairs := append([]string{"$WT", elementType(w), "$K", fmt.Sprint(k), "$BN", fmt.Sprint(t.BN), "$BK", fmt.Sprint(t.BK),
		"$LOOPATTR", t.loopAttr()}, extra...)
	return strings.NewReplacer(pairs...).Replace(text)
}

// loopAttr marks the K loop of a kernel of t pipelined Stages deep: without it, Triton
// pipelines no load of a loop that has no tt.dot.
func (t Tile) loopAttr() string {
	if t.Stages > 1 {
		return fmt.Sprintf(" {tt.num_stages = %d : i32}", t.Stages)
	}
	return ""
}

// dotTTIR is GEMVTTIR's kernel for a Dot tile, of x's dtype x (GEMVFP8TTIR's for FP8
// bytes): each K step loads x's [R, BK] tile (R the tile's dotRows; rows past m-1 read
// row m-1) and Wᵀ's [BK, BN] tile (W's rows read across, as a transposed operand; FP8
// bytes by a bfloat16 x converted to bfloat16 through float16 and float32, exactly) and
// accumulates their tt.dot into one [R, BN] float32 accumulator; the rows below m are
// stored, rounded for a bfloat16 y.
func dotTTIR(m, n, k int, t Tile, x, w, out dtypes.DType) string {
	round, stored := "", "%acc"
	if out == dtypes.BFloat16 {
		round, stored = "    %yt = arith.truncf %acc : tensor<$RxBNxf32> to tensor<$RxBNxbf16>\n", "%yt"
	}
	text := kernelHead + `    %rm = tt.make_range {end = $R : i32, start = 0 : i32} : tensor<$Rxi32>
    %mlast = arith.constant dense<$MLAST> : tensor<$Rxi32>
    %rmc = arith.minsi %rm, %mlast : tensor<$Rxi32>
    %Kr = arith.constant dense<$K> : tensor<$Rxi32>
    %xrow = arith.muli %rmc, %Kr : tensor<$Rxi32>
    %xrow2 = tt.expand_dims %xrow {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %xrowb = tt.broadcast %xrow2 : tensor<$Rx1xi32> -> tensor<$RxBKxi32>
    %rk = tt.make_range {end = $BK : i32, start = 0 : i32} : tensor<$BKxi32>
    %rkx = tt.expand_dims %rk {axis = 0 : i32} : tensor<$BKxi32> -> tensor<1x$BKxi32>
    %rkxb = tt.broadcast %rkx : tensor<1x$BKxi32> -> tensor<$RxBKxi32>
    %xoff = arith.addi %xrowb, %rkxb : tensor<$RxBKxi32>
    %xbase = tt.splat %x : !tt.ptr<bf16> -> tensor<$RxBKx!tt.ptr<bf16>>
    %xp0 = tt.addptr %xbase, %xoff : tensor<$RxBKx!tt.ptr<bf16>>, tensor<$RxBKxi32>
    %rn = tt.make_range {end = $BN : i32, start = 0 : i32} : tensor<$BNxi32>
    %n0s = tt.splat %n0 : i32 -> tensor<$BNxi32>
    %cols = arith.addi %n0s, %rn : tensor<$BNxi32>
    %Kn = arith.constant dense<$K> : tensor<$BNxi32>
    %coloff = arith.muli %cols, %Kn : tensor<$BNxi32>
    %coloff2 = tt.expand_dims %coloff {axis = 0 : i32} : tensor<$BNxi32> -> tensor<1x$BNxi32>
    %coloffb = tt.broadcast %coloff2 : tensor<1x$BNxi32> -> tensor<$BKx$BNxi32>
    %rkw = tt.expand_dims %rk {axis = 1 : i32} : tensor<$BKxi32> -> tensor<$BKx1xi32>
    %rkwb = tt.broadcast %rkw : tensor<$BKx1xi32> -> tensor<$BKx$BNxi32>
    %woff = arith.addi %coloffb, %rkwb : tensor<$BKx$BNxi32>
    %wbase = tt.splat %w : !tt.ptr<$WT> -> tensor<$BKx$BNx!tt.ptr<$WT>>
    %wp0 = tt.addptr %wbase, %woff : tensor<$BKx$BNx!tt.ptr<$WT>>, tensor<$BKx$BNxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$RxBNxf32>
    %acc = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero) -> (tensor<$RxBNxf32>) : i32 {
      %kx = tt.splat %k : i32 -> tensor<$RxBKxi32>
      %xp = tt.addptr %xp0, %kx : tensor<$RxBKx!tt.ptr<bf16>>, tensor<$RxBKxi32>
      %xv = tt.load %xp : tensor<$RxBKx!tt.ptr<bf16>>
      %kw = tt.splat %k : i32 -> tensor<$BKx$BNxi32>
      %wp = tt.addptr %wp0, %kw : tensor<$BKx$BNx!tt.ptr<$WT>>, tensor<$BKx$BNxi32>
      %wv = tt.load %wp : tensor<$BKx$BNx!tt.ptr<$WT>>
$WBF16      %d = tt.dot %xv, $WB, %a : tensor<$RxBKx$DT> * tensor<$BKx$BNx$DT> -> tensor<$RxBNxf32>
      scf.yield %d : tensor<$RxBNxf32>
    }$LOOPATTR
` + launchMark + `    %Nr = arith.constant dense<$N> : tensor<$Rxi32>
    %yrow = arith.muli %rm, %Nr : tensor<$Rxi32>
    %yrow2 = tt.expand_dims %yrow {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %yrowb = tt.broadcast %yrow2 : tensor<$Rx1xi32> -> tensor<$RxBNxi32>
    %cols2 = tt.expand_dims %cols {axis = 0 : i32} : tensor<$BNxi32> -> tensor<1x$BNxi32>
    %colsb = tt.broadcast %cols2 : tensor<1x$BNxi32> -> tensor<$RxBNxi32>
    %yoff = arith.addi %yrowb, %colsb : tensor<$RxBNxi32>
    %ybase = tt.splat %y : !tt.ptr<$YT> -> tensor<$RxBNx!tt.ptr<$YT>>
    %yp = tt.addptr %ybase, %yoff : tensor<$RxBNx!tt.ptr<$YT>>, tensor<$RxBNxi32>
    %mr = arith.constant dense<$M> : tensor<$Rxi32>
    %rowok = arith.cmpi slt, %rm, %mr : tensor<$Rxi32>
    %rowok2 = tt.expand_dims %rowok {axis = 1 : i32} : tensor<$Rxi1> -> tensor<$Rx1xi1>
    %store = tt.broadcast %rowok2 : tensor<$Rx1xi1> -> tensor<$RxBNxi1>
` + round + `    tt.store %yp, ` + stored + `, %store : tensor<$RxBNx!tt.ptr<$YT>>
    tt.return
  }
}`
	if t.Split > 1 {
		// Program pid sums K steps [pid % Split · K/Split, + K/Split) of W's tile
		// pid / Split into its own slice of y.
		text = strings.Replace(text, "    %n0 = arith.muli %pid, %cBN : i32\n", `    %cS = arith.constant $SPLIT : i32
    %pidk = arith.remsi %pid, %cS : i32
    %pidn = arith.divsi %pid, %cS : i32
    %n0 = arith.muli %pidn, %cBN : i32
    %cKS = arith.constant $KSPLIT : i32
    %kb = arith.muli %pidk, %cKS : i32
    %ke = arith.addi %kb, %cKS : i32
`, 1)
		text = strings.Replace(text, "scf.for %k = %c0 to %cK step %cBK", "scf.for %k = %kb to %ke step %cBK", 1)
		text = strings.Replace(text, "    %ybase = tt.splat %y :", `    %cMN = arith.constant $MN : i32
    %ys0 = arith.muli %pidk, %cMN : i32
    %ys = tt.addptr %y, %ys0 : !tt.ptr<$YT>, i32
    %ybase = tt.splat %ys :`, 1)
		text = strings.NewReplacer("$SPLIT", fmt.Sprint(t.Split), "$KSPLIT", fmt.Sprint(k/t.Split), "$MN", fmt.Sprint(m*n)).Replace(text)
	}
	// x's pointers are the only bfloat16 ones written out (W's are $WT, y's $YT).
	text = strings.ReplaceAll(text, "!tt.ptr<bf16>", "!tt.ptr<$XT>")
	convert, wb, dt := "", "%wv", "bf16"
	switch {
	case x == dtypes.Uint8:
		dt = "f8E4M3FN" // FP8 times FP8 on the tensor cores, nothing converted
	case w == dtypes.Uint8:
		convert, wb = `      %wh = tt.fp_to_fp %wv : tensor<$BKx$BNxf8E4M3FN> -> tensor<$BKx$BNxf16>
      %wf = arith.extf %wh : tensor<$BKx$BNxf16> to tensor<$BKx$BNxf32>
      %wb = arith.truncf %wf : tensor<$BKx$BNxf32> to tensor<$BKx$BNxbf16>
`, "%wb"
	}
	text = strings.NewReplacer("$WBF16", convert, "$WB", wb, "$DT", dt).Replace(text)
	r := t.dotRows()
	return strings.NewReplacer("$RxBK", fmt.Sprintf("%dx%d", r, t.BK), "$RxBN", fmt.Sprintf("%dx%d", r, t.BN),
		"$Rx", fmt.Sprintf("%dx", r), "$R ", fmt.Sprintf("%d ", r), "$MLAST", fmt.Sprint(m-1), "$M", fmt.Sprint(m),
		"$K", fmt.Sprint(k), "$N", fmt.Sprint(n), "$BK", fmt.Sprint(t.BK), "$BN", fmt.Sprint(t.BN),
		"$LOOPATTR", t.loopAttr(), "$WT", elementType(w), "$XT", elementType(x), "$YT", elementType(out)).Replace(text)
}

// GEMVFP8TTIR is the kernel @gemm of GEMVTTIR's Dot tile for x [m, k] of FP8 E4M3FN
// bytes too (package quant's W8A8 layers quantize their input): the bytes of both
// multiplied on the tensor cores as FP8, nothing converted, into float32 sums.
func GEMVFP8TTIR(m, n, k int, t Tile, out dtypes.DType) (string, error) {
	if err := CheckGEMVFP8(m, n, k, t, out); err != nil {
		return "", err
	}
	return dotTTIR(m, n, k, t, dtypes.Uint8, dtypes.Uint8, out), nil
}

// CheckGEMVFP8 says why GEMVFP8TTIR cannot write the kernel of m rows, W [n, k], tile t
// and output dtype out, or returns nil: CheckGEMV's reasons, and t must be a Dot tile
// of K steps of at least 32 (FP8 tt.dot's smallest).
func CheckGEMVFP8(m, n, k int, t Tile, out dtypes.DType) error {
	if err := CheckGEMV(m, n, k, t, out); err != nil {
		return err
	}
	if !t.Dot || t.BK < 32 {
		return fmt.Errorf("triton: GEMV of FP8 x: tile %v: only Dot tiles of K steps of at least 32 (FP8 tt.dot's)", t)
	}
	return nil
}
