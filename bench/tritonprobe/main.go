//go:build cgo && !noxla

// Command tritonprobe checks whether XLA's CUDA PJRT plugin runs a Triton kernel that a
// StableHLO program embeds as XLA's __gpu$xla.gpu.triton custom call, built with only
// go-xla's public stablehlo and pjrt packages, and how fast our own GEMV kernels are
// there. GoMLX's graph API cannot call a custom kernel (BENCHMARKS.md, "Where our time
// goes"); this is the route that would remain.
//
// It runs hand-written Triton IR (TTIR) kernels: y = 2x over 1024 floats, then
// y = x·Wᵀ for each weight shape of MiniCPM5-2B (W [n, k] bf16 row-major, x [m, k]
// bf16, float32 accumulation, y [m, n] bf16) at 1 row (the AR step), 4 rows (the
// 4-token denoise step) and 8 rows (the fused step), a few tiles each; at 4 and 8 rows
// also tiles that multiply on the tensor cores (triton.Tile's Dot, not yet run on a
// GPU). Every kernel is checked against XLA's dot of the same shapes and types, and
// both are timed inside a While.
// It prints one table row per shape and row count, and the GEMMs of one step summed
// over the layers. With -prefetch it asks instead whether a kernel that prefetches a
// weight into L2 speeds up XLA's GEMM of it after a few small kernels (prefetch.go);
// with -persistent, what a grid-wide barrier costs a persistent kernel running a chain
// of products, against a launch per product (persistent.go). It needs the GPU:
//
//	tritonprobe -plugin .../jax_plugins/xla_cuda13/xla_cuda_plugin.so [-prefetch | -persistent]
//
// A failing kernel prints one line on stdout and XLA's whole message on stderr.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types"
	"github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

var (
	pluginPath = flag.String("plugin", "", "the CUDA PJRT plugin (.so)")
	shapeList  = flag.String("shapes", "qkv,o,gate_up,down,head", "the weight shapes to time, comma-separated")
	iters      = flag.Int("iters", 200, "While iterations per execution (each calls the GEMM once per copy of W)")
	printOnly  = flag.Bool("print", false, "print the StableHLO programs and exit (needs no GPU)")
	prefetch   = flag.Bool("prefetch", false, "run the L2 prefetch probe (prefetch.go) instead of the GEMV tiles'")
	persistent = flag.Bool("persistent", false, "run the persistent-kernel probe (persistent.go) instead of the GEMV tiles'")
)

// layerShape is one of MiniCPM5-2B's weight matrices, W [n, k], and how many of them
// one step multiplies.
type layerShape struct {
	name    string
	n, k    int
	perStep int
}

// bytes is the size of W, what a GEMV streams.
func (s layerShape) bytes() int { return s.n * s.k * 2 }

var allShapes = []layerShape{
	{"qkv", 2560, 2048, 42}, {"o", 2048, 2048, 42}, {"gate_up", 12288, 2048, 42},
	{"down", 2048, 6144, 42}, {"head", 130560, 2048, 1},
}

// rowCounts are the rows of x: the AR step's token, the denoise step's 4 and the fused
// step's 8.
var rowCounts = []int{1, 4, 8}

// tiles are the GEMV tiles tried per row count, each within triton.MaxAccumulators
// float32 accumulators per thread (m × bn × bk / 128): first one not pipelined (at 1
// row, the tile of the kernel that ran), then it pipelined, then twice the rows for
// half the K step. Each program reads all of x, m/bn of its W bytes, again from L2:
// hence bn 8 and 16 at 4 rows, not 4. At 4 and 8 rows, where one accumulator per row
// lost to XLA's dot in run R (BENCHMARKS.md), two tensor-core (Dot) tiles follow.
var tiles = map[int][]triton.Tile{
	1: {{BN: 8, BK: 512, Stages: 1}, {BN: 8, BK: 512, Stages: 3}, {BN: 16, BK: 256, Stages: 3}},
	4: {{BN: 8, BK: 256, Stages: 1}, {BN: 8, BK: 256, Stages: 3}, {BN: 16, BK: 128, Stages: 3},
		{BN: 16, BK: 256, Stages: 4, Dot: true}, {BN: 32, BK: 128, Stages: 4, Dot: true}},
	8: {{BN: 8, BK: 128, Stages: 1}, {BN: 8, BK: 128, Stages: 3}, {BN: 16, BK: 64, Stages: 3},
		{BN: 16, BK: 256, Stages: 4, Dot: true}, {BN: 32, BK: 128, Stages: 4, Dot: true}},
}

// streamBytes is how many bytes of copies of W each timed loop cycles through: well
// over the H200's 50 MB L2, so that every call streams its W from HBM, as the calls
// of a step's 42 layers do.
const streamBytes = 128 << 20

// copiesOf is how many copies of W a timed loop of s cycles through.
func copiesOf(s layerShape) int { return (streamBytes + s.bytes() - 1) / s.bytes() }

// maxErr is the largest max |triton - xla| / max |xla| accepted: both round y to
// bf16, so a sum on the other side of a rounding boundary differs by one bf16 ulp.
const maxErr = 1e-2

func main() {
	flag.Parse()
	run, err := parseShapes(*shapeList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tritonprobe:", err)
		os.Exit(2)
	}
	if *iters < 1 {
		fmt.Fprintln(os.Stderr, "tritonprobe: -iters must be positive")
		os.Exit(2)
	}
	if *printOnly {
		switch {
		case *persistent:
			launches, kernel, constant, xla := chainPrograms(2048, 2048)
			for _, b := range []*stablehlo.Builder{launches, kernel, constant, xla} {
				fmt.Printf("%s\n", must(b.Build()))
			}
		case *prefetch:
			printPrefetchPrograms(run)
		default:
			printPrograms(run)
		}
		return
	}
	if *pluginPath == "" {
		fmt.Fprintln(os.Stderr, "tritonprobe: -plugin is required")
		os.Exit(2)
	}
	plugin, err := pjrt.GetPlugin(*pluginPath)
	check("loading the plugin", err)
	client, err := plugin.NewClient(nil)
	check("creating a client", err)
	fmt.Println("plugin:", plugin)
	ok := probeScale(client)
	switch {
	case *persistent:
		ok = probePersistent(client) && ok
	case *prefetch:
		ok = probePrefetch(client, run) && ok
	default:
		ok = probeGEMMs(client, run) && ok
	}
	if !ok {
		os.Exit(1)
	}
}

// parseShapes returns the shapes of allShapes that list names.
func parseShapes(list string) ([]layerShape, error) {
	var run []layerShape
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(allShapes, func(s layerShape) bool { return s.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown shape %q", name)
		}
		run = append(run, allShapes[i])
	}
	return run, nil
}

// must returns v, or exits with err: building the probe's programs fails only on a
// bug of the probe.
func must[T any](v T, err error) T {
	check("building StableHLO", err)
	return v
}

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "tritonprobe: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// failed reports a kernel that did not compile or run: its first line on stdout, to
// keep the table readable, and the whole message (XLA's quotes the TTIR) on stderr.
func failed(what string, err error) {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	fmt.Printf("%s: FAILED: %.300s\n", what, msg)
	fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", what, err)
}

const scaleTTIR = `module {
  tt.func public @scale(%x: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %two = arith.constant dense<2.000000e+00> : tensor<1024xf32>
    %i = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32>
    %xs = tt.splat %x : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
    %xp = tt.addptr %xs, %i : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
    %v = tt.load %xp : tensor<1024x!tt.ptr<f32>>
    %r = arith.mulf %v, %two : tensor<1024xf32>
    %ys = tt.splat %y : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
    %yp = tt.addptr %ys, %i : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
    tt.store %yp, %r : tensor<1024x!tt.ptr<f32>>
    tt.return
  }
}`

// scaleProgram is y = 2x [1024] float32 by the Triton kernel.
func scaleProgram() *stablehlo.Builder {
	shape := shapes.Make(dtypes.Float32, 1024)
	b := stablehlo.New("triton_scale")
	fn := b.Main()
	x := must(fn.NamedInput("x", shape))
	y := must(triton.Kernels{}.Call("scale", scaleTTIR, 1, triton.Warps, 1, []*stablehlo.Value{x}, shape))
	check("scale return", fn.Return(y[0]))
	return b
}

// probeScale runs y = 2x through the custom call and checks it.
func probeScale(client *pjrt.Client) bool {
	xs := make([]float32, 1024)
	for i := range xs {
		xs[i] = float32(i) - 100
	}
	x := upload(client, xs, 1024)
	defer destroy(x)
	out, _, err := compileAndRun(client, scaleProgram(), x)
	if err != nil {
		failed("scale", err)
		return false
	}
	got := out.([]float32)
	for i, v := range got {
		if v != 2*xs[i] {
			fmt.Printf("scale: WRONG at %d: %g, want %g\n", i, v, 2*xs[i])
			return false
		}
	}
	fmt.Println("scale: OK (the Triton custom call compiled and ran)")
	return true
}

// gemmFunc appends y [m, n] bf16 = x·Wᵀ to x's function, x [m, k] and W [n, k] bf16.
type gemmFunc func(x, w *stablehlo.Value) *stablehlo.Value

// xlaGEMM is XLA's dot, with bf16 output as model/linear.go's.
func xlaGEMM(x, w *stablehlo.Value) *stablehlo.Value {
	return must(stablehlo.DotGeneral(x, []int{1}, nil, w, []int{1}, nil).OutputDType(dtypes.BFloat16).Done())
}

// tritonGEMM is package triton's GEMV kernel of tile t, bf16 output.
func tritonGEMM(t triton.Tile) gemmFunc {
	return func(x, w *stablehlo.Value) *stablehlo.Value {
		return must(triton.Kernels{}.GEMV(x, w, t, dtypes.BFloat16))
	}
}

// gemmPrograms builds gemm's programs for s at m rows: check (inputs x and W, output
// y) and loop (inputs x and copiesOf(s) copies of W, timed). label names them.
func gemmPrograms(s layerShape, m int, label string, gemm gemmFunc) (checkProgram, loopProgram *stablehlo.Builder) {
	xShape, wShape := shapes.Make(dtypes.BFloat16, m, s.k), shapes.Make(dtypes.BFloat16, s.n, s.k)
	name := fmt.Sprintf("%s_m%d_%s", s.name, m, label)
	checkProgram = stablehlo.New(name)
	fn := checkProgram.Main()
	y := gemm(must(fn.NamedInput("x", xShape)), must(fn.NamedInput("w", wShape)))
	check(name, fn.Return(y))
	loopProgram = whileProgram(name+"_loop", xShape, slices.Repeat([]shapes.Shape{wShape}, copiesOf(s)),
		func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			for _, w := range ws {
				x = feedback(body, x, gemm(x, w))
			}
			return x
		})
	return checkProgram, loopProgram
}

// overheadProgram is the timed loop at m rows with x ← -x for all its work: what each
// GEMM call in a loop adds to the GEMM, at most (the feedback is one small kernel).
func overheadProgram(m int) *stablehlo.Builder {
	return whileProgram(fmt.Sprintf("overhead_m%d", m), shapes.Make(dtypes.BFloat16, m, 2048), nil,
		func(body *stablehlo.Function, x *stablehlo.Value, _ []*stablehlo.Value) *stablehlo.Value {
			return feedback(body, x, must(stablehlo.Negate(x)))
		})
}

// feedback writes y's first columns (as many as x has, at most) over x's, so that each
// GEMM of the loop depends on the one before and none is loop-invariant. The
// optimization barrier keeps XLA from narrowing its dot to the columns kept.
func feedback(body *stablehlo.Function, x, y *stablehlo.Value) *stablehlo.Value {
	m, cols := x.Shape().Dimensions[0], min(x.Shape().Dimensions[1], y.Shape().Dimensions[1])
	y = must(stablehlo.OptimizationBarrier(y))[0]
	head := must(stablehlo.Slice(y, []int{0, 0}, []int{m, cols}, nil))
	zero := must(body.ConstantFromScalar(int32(0)))
	return must(stablehlo.DynamicUpdateSlice(x, head, []*stablehlo.Value{zero, zero}))
}

// whileProgram runs step *iters times in a While whose state is a counter, x (which
// step updates) and ws (passed through), and returns the last x.
func whileProgram(name string, xShape shapes.Shape, wShapes []shapes.Shape,
	step func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value) *stablehlo.Builder {
	b := stablehlo.New(name)
	fn := b.Main()
	init := []*stablehlo.Value{must(fn.ConstantFromScalar(int32(0))), must(fn.NamedInput("x", xShape))}
	for i, s := range wShapes {
		init = append(init, must(fn.NamedInput(fmt.Sprintf("w%d", i), s)))
	}
	// state declares a closure's loop state: the counter, x and ws.
	state := func(f *stablehlo.Function) []*stablehlo.Value {
		vs := make([]*stablehlo.Value, len(init))
		for i, v := range init {
			vs[i] = must(f.Input(v.Shape()))
		}
		return vs
	}
	cond := fn.Closure()
	i := state(cond)[0]
	limit := must(cond.ConstantFromScalar(int32(*iters)))
	check(name+" condition", cond.Return(must(stablehlo.Compare(i, limit, types.CompareLT, types.CompareSigned))))
	body := fn.Closure()
	vs := state(body)
	one := must(body.ConstantFromScalar(int32(1)))
	next := append([]*stablehlo.Value{must(stablehlo.Add(vs[0], one)), step(body, vs[1], vs[2:])}, vs[2:]...)
	check(name+" body", body.Return(next...))
	out := must(stablehlo.While(cond, body, init...))
	check(name+" return", fn.Return(out[1]))
	return b
}

// printPrograms prints every program the probe runs, each Triton kernel's TTIR as MLIR
// comments before its programs.
func printPrograms(run []layerShape) {
	show := func(bs ...*stablehlo.Builder) {
		for _, b := range bs {
			fmt.Printf("%s\n", must(b.Build()))
		}
	}
	show(scaleProgram())
	for _, s := range run {
		for _, m := range rowCounts {
			show(gemmPrograms(s, m, "xla", xlaGEMM))
			for _, t := range tiles[m] {
				fmt.Printf("// TTIR of %s at %d rows, tile %v:\n//   %s\n", s.name, m, t,
					strings.ReplaceAll(must(triton.GEMVTTIR(m, s.n, s.k, t, dtypes.BFloat16, dtypes.BFloat16)), "\n", "\n//   "))
				show(gemmPrograms(s, m, tileLabel(t), tritonGEMM(t)))
			}
		}
	}
	for _, m := range rowCounts {
		show(overheadProgram(m))
	}
}

// tileLabel names t's programs.
func tileLabel(t triton.Tile) string {
	if t.Dot {
		return fmt.Sprintf("triton_dot%dx%d_s%d", t.BN, t.BK, t.Stages)
	}
	return fmt.Sprintf("triton_%dx%d_s%d", t.BN, t.BK, t.Stages)
}

// timing is one shape's time per GEMM call at one row count.
type timing struct {
	xla, triton time.Duration // triton: the best tile's, 0 if none ran right
}

// probeGEMMs checks and times every shape of run at every row count, a table row
// each, then the loop's overhead and the GEMMs of one step.
func probeGEMMs(client *pjrt.Client, run []layerShape) bool {
	fmt.Printf("y [M, N] bf16 = x [M, K] bf16 times W [N, K]^T bf16, float32 accumulation; us per call in a While "+
		"of %d iterations (median of 5 executions), cycling through %d MiB of copies of W; GB/s of W\n",
		*iters, streamBytes>>20)
	fmt.Printf("%-8s %2s %6s %5s %8s %5s %9s %5s %7s %8s  %s\n",
		"shape", "M", "N", "K", "XLA us", "GB/s", "Triton us", "GB/s", "tri/xla", "max err", "us per tile")
	rng := rand.New(rand.NewPCG(7, 8))
	ok := true
	times := map[int][]timing{}
	for _, s := range run {
		// W's entries of variance 1/k keep y as large as x through the loop.
		w := randomBF16(rng, s.n*s.k, float32(math.Sqrt(3/float64(s.k))))
		ws := make([]*pjrt.Buffer, copiesOf(s))
		for i := range ws {
			ws[i] = upload(client, w, s.n, s.k)
		}
		for _, m := range rowCounts {
			x := upload(client, randomBF16(rng, m*s.k, 1), m, s.k)
			t, rowOK := probeRows(client, s, m, x, ws)
			destroy(x)
			times[m] = append(times[m], t)
			ok = ok && rowOK
		}
		destroy(ws...)
	}
	var overhead []string
	loopCost := map[int]time.Duration{}
	for _, m := range rowCounts {
		x := upload(client, randomBF16(rng, m*2048, 1), m, 2048)
		_, elapsed, err := compileAndRun(client, overheadProgram(m), x)
		destroy(x)
		check("the overhead loop", err)
		loopCost[m] = perCall(elapsed, 1)
		overhead = append(overhead, fmt.Sprintf("%.2f us at M=%d", us(loopCost[m]), m))
	}
	fmt.Printf("loop overhead per call, x <- -x alone in the same While: %s\n", strings.Join(overhead, ", "))
	calls, terms := 0, []string{}
	for _, s := range run {
		calls += s.perStep
		if s.perStep > 1 {
			terms = append(terms, fmt.Sprintf("%d x %s", s.perStep, s.name))
		} else {
			terms = append(terms, s.name)
		}
	}
	fmt.Printf("the GEMMs of one step, %s (%d calls):\n", strings.Join(terms, " + "), calls)
	for _, m := range rowCounts {
		var xla, tritonSum time.Duration
		complete := true // every shape has a Triton time
		for i, s := range run {
			t := times[m][i]
			xla += time.Duration(s.perStep) * t.xla
			tritonSum += time.Duration(s.perStep) * t.triton
			complete = complete && t.triton > 0
		}
		tri := "n/a"
		if complete {
			tri = fmt.Sprintf("%.3f ms (%.2fx)", ms(tritonSum), float64(tritonSum)/float64(xla))
		}
		fmt.Printf("  M=%d: XLA %.3f ms, Triton %s; of each, up to %.3f ms is loop overhead\n",
			m, ms(xla), tri, ms(time.Duration(calls)*loopCost[m]))
	}
	return ok
}

// probeRows checks every tile of s at m rows against XLA's dot, times them and XLA's
// dot, and prints the table row.
func probeRows(client *pjrt.Client, s layerShape, m int, x *pjrt.Buffer, ws []*pjrt.Buffer) (t timing, ok bool) {
	inputs := append([]*pjrt.Buffer{x}, ws...)
	checkP, loopP := gemmPrograms(s, m, "xla", xlaGEMM)
	ref, _, err := compileAndRun(client, checkP, inputs[:2]...)
	check(fmt.Sprintf("%s M=%d, XLA's dot", s.name, m), err)
	_, elapsed, err := compileAndRun(client, loopP, inputs...)
	check(fmt.Sprintf("%s M=%d, XLA's dot in a loop", s.name, m), err)
	t.xla = perCall(elapsed, len(ws))
	ok = true
	worst := 0.0
	var perTile []string
	for _, tl := range tiles[m] {
		what := fmt.Sprintf("%s M=%d, tile %v", s.name, m, tl)
		checkP, loopP := gemmPrograms(s, m, tileLabel(tl), tritonGEMM(tl))
		out, _, err := compileAndRun(client, checkP, inputs[:2]...)
		if err != nil {
			failed(what, err)
			ok = false
			continue
		}
		e := relErr(out.([]bfloat16.BFloat16), ref.([]bfloat16.BFloat16))
		if !(e <= maxErr) {
			fmt.Printf("%s: WRONG: max |triton - xla| / max |xla| = %.1e\n", what, e)
			ok = false
			continue
		}
		worst = max(worst, e)
		_, elapsed, err := compileAndRun(client, loopP, inputs...)
		if err != nil {
			failed(what+" in a loop", err)
			ok = false
			continue
		}
		per := perCall(elapsed, len(ws))
		perTile = append(perTile, fmt.Sprintf("%v %.2f", tl, us(per)))
		if t.triton == 0 || per < t.triton {
			t.triton = per
		}
	}
	gbs := func(d time.Duration) float64 { return float64(s.bytes()) / d.Seconds() / 1e9 }
	if t.triton == 0 {
		fmt.Printf("%-8s %2d %6d %5d %8.2f %5.0f %9s %5s %7s %8s\n", s.name, m, s.n, s.k, us(t.xla), gbs(t.xla),
			"-", "-", "-", "-")
		return t, ok
	}
	fmt.Printf("%-8s %2d %6d %5d %8.2f %5.0f %9.2f %5.0f %7.2f %8.1e  %s\n", s.name, m, s.n, s.k,
		us(t.xla), gbs(t.xla), us(t.triton), gbs(t.triton), float64(t.triton)/float64(t.xla), worst,
		strings.Join(perTile, ", "))
	return t, ok
}

// relErr is max |got - ref| / max |ref|, NaN where got has one.
func relErr(got, ref []bfloat16.BFloat16) float64 {
	worst, scale := 0.0, 0.0
	for i, r := range ref {
		worst = max(worst, math.Abs(got[i].Float64()-r.Float64()))
		scale = max(scale, math.Abs(r.Float64()))
	}
	return worst / scale
}

// randomBF16 is n values uniform in [-scale, scale).
func randomBF16(rng *rand.Rand, n int, scale float32) []bfloat16.BFloat16 {
	vs := make([]bfloat16.BFloat16, n)
	for i := range vs {
		vs[i] = bfloat16.FromFloat32((rng.Float32()*2 - 1) * scale)
	}
	return vs
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// upload copies the flat host slice of dims to the device; it exits on failure.
func upload(client *pjrt.Client, flat any, dims ...int) *pjrt.Buffer {
	buf, err := client.BufferFromHost().FromFlatDataWithDimensions(flat, dims).Done()
	check("copying an input to the device", err)
	return buf
}

func destroy(bufs ...*pjrt.Buffer) {
	for _, buf := range bufs {
		_ = buf.Destroy()
	}
}

// perCall is a timed loop's time per call: elapsed over *iters iterations of calls
// calls each.
func perCall(elapsed time.Duration, calls int) time.Duration {
	return elapsed / time.Duration(*iters*calls)
}

// compileAndRun compiles b, runs it on the inputs and returns its first output and the
// median time of 5 executions after a warm-up (each timed up to its output's arrival
// on the host).
func compileAndRun(client *pjrt.Client, b *stablehlo.Builder, inputs ...*pjrt.Buffer) (any, time.Duration, error) {
	program, err := b.Build()
	if err != nil {
		return nil, 0, fmt.Errorf("building StableHLO: %w", err)
	}
	exec, err := client.Compile().WithStableHLO(program).Done()
	if err != nil {
		return nil, 0, fmt.Errorf("compiling: %w", err)
	}
	defer func() { _ = exec.Destroy() }()
	var out any
	var times []time.Duration
	for run := range 6 {
		start := time.Now()
		results, err := exec.Execute(inputs...).DonateNone().Done()
		if err != nil {
			return nil, 0, fmt.Errorf("executing: %w", err)
		}
		out, _, err = results[0].ToFlatDataAndDimensions()
		destroy(results...)
		if err != nil {
			return nil, 0, fmt.Errorf("reading the output: %w", err)
		}
		if run > 0 {
			times = append(times, time.Since(start))
		}
	}
	slices.Sort(times)
	return out, times[len(times)/2], nil
}
