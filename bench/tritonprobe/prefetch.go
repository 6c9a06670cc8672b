//go:build cgo && !noxla

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// The prefetch probe (-prefetch): whether a kernel that asks the L2 cache to fetch a
// weight, and returns at once, lets XLA's 4-row GEMM after a few small kernels read
// that weight from L2 rather than from HBM. A step's layer runs small kernels (norms,
// attention, sums) between its GEMMs, during which HBM idles (BENCHMARKS.md, "Where our
// time goes"); a prefetch issued before them would overlap the next weight's stream
// with them. Each timed loop cycles through copies of W as gemmPrograms' do, and per
// copy runs waits small dots over a resident matrix, then XLA's GEMM of W; with the
// prefetch, a kernel first asks L2 for all of W (and copies x, which orders it before
// the waits). The PyTorch peer's AR step lost with bulk prefetches issued from its
// attention kernel, whose CTAs did not retire before their prefetches (run O in
// bench/pytorch/README.md), and from a kernel on a second stream (runs U, V): this
// times a kernel of its own in the one stream, bulk and per line, at 4 rows.

// prefetchWaits are the small dots run between the prefetch and the GEMM: a step's
// layer has 2 to 5 small kernels before each GEMM.
var prefetchWaits = []int{0, 2, 4}

// waitCols is the width of the small dots' matrix, [waitCols, waitCols] bf16 (128 KiB):
// it stays in L2, so the waits take time without streaming from HBM.
const waitCols = 256

// prefetchOp is how a prefetch kernel asks for W: PTX's bulk prefetch of chunk bytes
// at a time (sm_90), or a prefetch per 128-byte line.
type prefetchOp struct {
	name, ptx string
	chunk     int
}

var prefetchOps = []prefetchOp{
	{"bulk", "cp.async.bulk.prefetch.L2.global [$1], 4096;", 4096},
	{"line", "prefetch.global.L2 [$1];", 128},
}

// perProgram is the chunks of W each program of a prefetch kernel asks for.
func (op prefetchOp) perProgram() int {
	if op.chunk == 128 {
		return 1024
	}
	return 32
}

// prefetchTTIR is the prefetch kernel for x of xElems bf16 values: each of its
// programs copies up to copyElems of x to y and asks L2 for its perProgram chunks of W
// (bf16), one warp, one chunk per thread at a time.
func prefetchTTIR(op prefetchOp, xElems, copyElems int) string {
	// Longer marks first: at one position the Replacer takes the first that matches.
	return strings.NewReplacer("$CRANGE", programRange("coff", copyElems), "$QRANGE", programRange("chunks", op.perProgram()),
		"$CHUNK", fmt.Sprint(op.chunk/2), "$C", fmt.Sprint(copyElems), "$XN", fmt.Sprint(xElems), "$Q", fmt.Sprint(op.perProgram()),
		"$PTX", op.ptx).Replace(`module {
  tt.func public @prefetch(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %y: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %pid = tt.get_program_id x : i32
$CRANGE
    %xn = arith.constant dense<$XN> : tensor<$Cxi32>
    %in = arith.cmpi slt, %coff, %xn : tensor<$Cxi32>
    %xs = tt.splat %x : !tt.ptr<bf16> -> tensor<$Cx!tt.ptr<bf16>>
    %xp = tt.addptr %xs, %coff : tensor<$Cx!tt.ptr<bf16>>, tensor<$Cxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$Cxbf16>
    %v = tt.load %xp, %in, %zero : tensor<$Cx!tt.ptr<bf16>>
    %ys = tt.splat %y : !tt.ptr<bf16> -> tensor<$Cx!tt.ptr<bf16>>
    %yp = tt.addptr %ys, %coff : tensor<$Cx!tt.ptr<bf16>>, tensor<$Cxi32>
    tt.store %yp, %v, %in : tensor<$Cx!tt.ptr<bf16>>
$QRANGE
    %size = arith.constant dense<$CHUNK> : tensor<$Qxi32>
    %eoff = arith.muli %chunks, %size : tensor<$Qxi32>
    %ws = tt.splat %w : !tt.ptr<bf16> -> tensor<$Qx!tt.ptr<bf16>>
    %wp = tt.addptr %ws, %eoff : tensor<$Qx!tt.ptr<bf16>>, tensor<$Qxi32>
    %wa = tt.ptr_to_int %wp : tensor<$Qx!tt.ptr<bf16>> -> tensor<$Qxi64>
    %asked = tt.elementwise_inline_asm "$PTX mov.u32 $0, 0;" {constraints = "=r,l", packed_element = 1 : i32, pure = false} %wa : tensor<$Qxi64> -> tensor<$Qxi32>
    tt.return
  }
}`)
}

// programRange is the TTIR of %name, the program's slice of n indices: pid·n + [0, n).
func programRange(name string, n int) string {
	return strings.NewReplacer("$N", fmt.Sprint(n), "$V", name).Replace(`    %$V_n = arith.constant $N : i32
    %$V_base = arith.muli %pid, %$V_n : i32
    %$V_iota = tt.make_range {end = $N : i32, start = 0 : i32} : tensor<$Nxi32>
    %$V_bases = tt.splat %$V_base : i32 -> tensor<$Nxi32>
    %$V = arith.addi %$V_bases, %$V_iota : tensor<$Nxi32>`)
}

// prefetchKernel appends the prefetch kernel of op for W to x's function: it returns a
// copy of x, made by the kernel that asked L2 for W.
func prefetchKernel(op prefetchOp, x, w *stablehlo.Value) *stablehlo.Value {
	xElems := x.Shape().Size()
	programs := w.Shape().Size() * 2 / op.chunk / op.perProgram()
	copyElems := 1
	for copyElems*programs < xElems {
		copyElems *= 2
	}
	y := must(triton.Kernels{}.Call("prefetch", prefetchTTIR(op, xElems, copyElems), programs, 1, 1,
		[]*stablehlo.Value{x, w}, x.Shape()))
	return y[0]
}

// waitChain runs waits dependent small dots on x's first waitCols columns, over the
// resident matrix r, and writes the last one's output back over them, so that what
// follows depends on every wait.
func waitChain(body *stablehlo.Function, x, r *stablehlo.Value, waits int) *stablehlo.Value {
	if waits == 0 {
		return x
	}
	m := x.Shape().Dimensions[0]
	z := must(stablehlo.Slice(x, []int{0, 0}, []int{m, waitCols}, nil))
	for range waits {
		z = xlaGEMM(z, r)
	}
	zero := must(body.ConstantFromScalar(int32(0)))
	return must(stablehlo.DynamicUpdateSlice(x, z, []*stablehlo.Value{zero, zero}))
}

// prefetchProgram is the timed loop of s at m rows with waits small dots before each
// GEMM, after op's prefetch of its W where op is not nil. Its inputs are x, the
// resident matrix and copiesOf(s) copies of W.
func prefetchProgram(s layerShape, m, waits int, op *prefetchOp) *stablehlo.Builder {
	xShape := shapes.Make(dtypes.BFloat16, m, s.k)
	label := "none"
	if op != nil {
		label = op.name
	}
	wShapes := append([]shapes.Shape{shapes.Make(dtypes.BFloat16, waitCols, waitCols)},
		make([]shapes.Shape, copiesOf(s))...)
	for i := 1; i < len(wShapes); i++ {
		wShapes[i] = shapes.Make(dtypes.BFloat16, s.n, s.k)
	}
	return whileProgram(fmt.Sprintf("prefetch_%s_m%d_w%d_%s", s.name, m, waits, label), xShape, wShapes,
		func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			for _, w := range ws[1:] {
				in := x
				if op != nil {
					in = prefetchKernel(*op, in, w)
				}
				x = feedback(body, x, xlaGEMM(waitChain(body, in, ws[0], waits), w))
			}
			return x
		})
}

// fitsPrefetch reports whether W of s is a whole number of every prefetch kernel's
// programs and small enough for L2 to hold beside what else the loop reads.
func fitsPrefetch(s layerShape) bool {
	for _, op := range prefetchOps {
		if s.bytes()%(op.chunk*op.perProgram()) != 0 {
			return false
		}
	}
	return s.bytes() <= 32<<20
}

// printPrefetchPrograms prints the prefetch probe's programs at 2 waits.
func printPrefetchPrograms(run []layerShape) {
	for _, s := range run {
		if !fitsPrefetch(s) {
			continue
		}
		fmt.Printf("%s\n", must(prefetchProgram(s, 4, 2, nil).Build()))
		for _, op := range prefetchOps {
			fmt.Printf("%s\n", must(prefetchProgram(s, 4, 2, &op).Build()))
		}
	}
}

// probePrefetch times, for each shape of run whose W fits the prefetch kernels'
// programs, XLA's 4-row GEMM after 0, 2 and 4 small dots, without a prefetch and after
// each prefetch op, checks that the prefetch changes no output, and prints a table.
func probePrefetch(client *pjrt.Client, run []layerShape) bool {
	const m = 4
	fmt.Printf("L2 prefetch before XLA's %d-row GEMM: us per GEMM in a While of %d iterations (median of 5 "+
		"executions), cycling through %d MiB of copies of W, after waits small dots over a resident [%d, %d]\n",
		m, *iters, streamBytes>>20, waitCols, waitCols)
	fmt.Printf("%-8s %5s %10s %10s %10s %14s %14s\n", "shape", "waits", "MiB of W", "no prefetch", "GB/s",
		"bulk (saved)", "line (saved)")
	rng := rand.New(rand.NewPCG(11, 12))
	ok := true
	for _, s := range run {
		if !fitsPrefetch(s) {
			fmt.Printf("%-8s skipped: W is not a whole number of the kernels' programs, or not under 32 MiB\n", s.name)
			continue
		}
		w := randomBF16(rng, s.n*s.k, float32(math.Sqrt(3/float64(s.k))))
		resident := upload(client, randomBF16(rng, waitCols*waitCols, float32(math.Sqrt(3/float64(waitCols)))), waitCols, waitCols)
		inputs := []*pjrt.Buffer{upload(client, randomBF16(rng, m*s.k, 1), m, s.k), resident}
		for range copiesOf(s) {
			inputs = append(inputs, upload(client, w, s.n, s.k))
		}
		for _, waits := range prefetchWaits {
			ref, elapsed, err := compileAndRun(client, prefetchProgram(s, m, waits, nil), inputs...)
			check(fmt.Sprintf("%s, %d waits, no prefetch", s.name, waits), err)
			plain := perCall(elapsed, copiesOf(s))
			row := fmt.Sprintf("%-8s %5d %10.1f %10.2f %10.0f", s.name, waits, float64(s.bytes())/(1<<20), us(plain),
				float64(s.bytes())/plain.Seconds()/1e9)
			for _, op := range prefetchOps {
				what := fmt.Sprintf("%s, %d waits, %s prefetch", s.name, waits, op.name)
				out, elapsed, err := compileAndRun(client, prefetchProgram(s, m, waits, &op), inputs...)
				if err != nil {
					failed(what, err)
					row += fmt.Sprintf(" %14s", "failed")
					ok = false
					continue
				}
				if e := relErr(out.([]bfloat16.BFloat16), ref.([]bfloat16.BFloat16)); !(e <= maxErr) {
					fmt.Printf("%s: WRONG: max |prefetched - plain| / max |plain| = %.1e\n", what, e)
					ok = false
				}
				t := perCall(elapsed, copiesOf(s))
				row += fmt.Sprintf(" %7.2f (%+.2f)", us(t), us(plain-t))
			}
			fmt.Println(row)
		}
		destroy(inputs...)
	}
	return ok
}
