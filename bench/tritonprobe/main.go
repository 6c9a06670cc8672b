//go:build cgo && !noxla

// Command tritonprobe checks whether XLA's CUDA PJRT plugin runs a Triton kernel that a
// StableHLO program embeds as XLA's __gpu$xla.gpu.triton custom call, built with only
// go-xla's public stablehlo and pjrt packages. GoMLX's graph API cannot call a custom
// kernel (BENCHMARKS.md, "Where our time goes"); this is the route that would remain.
//
// It runs two hand-written Triton IR (TTIR) kernels: y = 2x over 1024 floats, and a
// 1-row bf16 GEMV y = W·x with W [n, k] (float32 accumulation, 8 rows × 512 columns
// per program, as the PyTorch peer's gate/up GEMV), and times the GEMV inside a While
// against XLA's own dot of the same shapes. It needs the GPU:
//
//	tritonprobe -plugin .../jax_plugins/xla_cuda13/xla_cuda_plugin.so
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
)

var (
	pluginPath = flag.String("plugin", "", "the CUDA PJRT plugin (.so)")
	rows       = flag.Int("n", 12288, "GEMV output rows (gate/up of MiniCPM5-2B: 12288)")
	cols       = flag.Int("k", 2048, "GEMV input length, a multiple of 512")
	iters      = flag.Int("iters", 200, "GEMVs per execution, inside a While")
	printOnly  = flag.Bool("print", false, "print the StableHLO programs and exit (needs no GPU)")
)

func main() {
	flag.Parse()
	if *printOnly {
		for _, b := range []*stablehlo.Builder{scaleProgram(), gemvProgram(true, true), gemvProgram(false, true)} {
			fmt.Printf("%s\n", must(b.Build()))
		}
		return
	}
	if *pluginPath == "" || *cols%gemvBlockK != 0 || *rows%gemvBlockN != 0 {
		fmt.Fprintln(os.Stderr, "tritonprobe: -plugin is required; -k must be a multiple of 512 and -n of 8")
		os.Exit(2)
	}
	plugin, err := pjrt.GetPlugin(*pluginPath)
	check("loading the plugin", err)
	client, err := plugin.NewClient(nil)
	check("creating a client", err)
	fmt.Println("plugin:", plugin)
	ok := probeScale(client)
	ok = probeGEMV(client) && ok
	if !ok {
		os.Exit(1)
	}
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

// tritonCall is the custom call running kernel name of the TTIR module ir on the
// operands, writing outputs: XLA passes the operands' and then the outputs' buffers as
// the kernel's pointer arguments. Its backend config is the MLIR dictionary that XLA's
// TritonCall::Parse reads.
func tritonCall(name, ir string, grid, warps, stages int, operands []*stablehlo.Value, outputs ...shapes.Shape) ([]*stablehlo.Value, error) {
	config := fmt.Sprintf(`{name = "%s", ir = "%s", num_stages = %d : i32, num_warps = %d : i32, `+
		`grid_x = %d : i32, grid_y = 1 : i32, grid_z = 1 : i32, debug = false}`,
		name, mlirEscape(ir), stages, warps, grid)
	return stablehlo.CustomCallV2("__gpu$xla.gpu.triton", config, operands, nil, outputs, nil)
}

// mlirEscape escapes s for an MLIR string literal: quotes and backslashes as hex
// escapes, newlines as \0A.
func mlirEscape(s string) string {
	return strings.NewReplacer(`\`, `\5C`, `"`, `\22`, "\n", `\0A`).Replace(s)
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
	y := must(tritonCall("scale", scaleTTIR, 1, 4, 1, []*stablehlo.Value{x}, shape))
	check("scale return", fn.Return(y[0]))
	return b
}

// probeScale runs y = 2x through the custom call and checks it.
func probeScale(client *pjrt.Client) bool {
	b := scaleProgram()
	xs := make([]float32, 1024)
	for i := range xs {
		xs[i] = float32(i) - 100
	}
	out, _, err := compileAndRun(client, b, []any{xs}, [][]int{{1024}})
	if err != nil {
		fmt.Println("scale: FAILED:", err)
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

const gemvBlockN, gemvBlockK = 8, 512

// gemvTTIR is y[n0:n0+8] = W[n0:n0+8, :]·x for the program's n0, W [n, k] bf16
// row-major, x [k] bf16, y [n] float32: a [8, 512] float32 accumulator over the K
// steps, reduced at the end.
func gemvTTIR(k int) string {
	return strings.NewReplacer("$K", fmt.Sprint(k), "$BN", fmt.Sprint(gemvBlockN), "$BK", fmt.Sprint(gemvBlockK)).Replace(`module {
  tt.func public @gemv(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
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
    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    %acc = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero) -> (tensor<$BNx$BKxf32>) : i32 {
      %kw = tt.splat %k : i32 -> tensor<$BNx$BKxi32>
      %wp = tt.addptr %wp0, %kw : tensor<$BNx$BKx!tt.ptr<bf16>>, tensor<$BNx$BKxi32>
      %wv = tt.load %wp : tensor<$BNx$BKx!tt.ptr<bf16>>
      %kx = tt.splat %k : i32 -> tensor<$BKxi32>
      %xp = tt.addptr %xp0, %kx : tensor<$BKx!tt.ptr<bf16>>, tensor<$BKxi32>
      %xv = tt.load %xp : tensor<$BKx!tt.ptr<bf16>>
      %wf = arith.extf %wv : tensor<$BNx$BKxbf16> to tensor<$BNx$BKxf32>
      %xf = arith.extf %xv : tensor<$BKxbf16> to tensor<$BKxf32>
      %xf2 = tt.expand_dims %xf {axis = 0 : i32} : tensor<$BKxf32> -> tensor<1x$BKxf32>
      %xfb = tt.broadcast %xf2 : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p = arith.mulf %wf, %xfb : tensor<$BNx$BKxf32>
      %a2 = arith.addf %a, %p : tensor<$BNx$BKxf32>
      scf.yield %a2 : tensor<$BNx$BKxf32>
    }
    %sum = "tt.reduce"(%acc) <{axis = 1 : i32}> ({
    ^bb0(%l: f32, %r: f32):
      %s = arith.addf %l, %r : f32
      tt.reduce.return %s : f32
    }) : (tensor<$BNx$BKxf32>) -> tensor<$BNxf32>
    %ybase = tt.splat %y : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>
    %yp = tt.addptr %ybase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    tt.store %yp, %sum : tensor<$BNx!tt.ptr<f32>>
    tt.return
  }
}`)
}

// gemvProgram builds y = W·x, once (loop false) or *iters times in a While whose
// state feeds a slice of each y back into x (so no call is loop-invariant), by the
// Triton kernel (triton) or XLA's dot.
func gemvProgram(triton, loop bool) *stablehlo.Builder {
	n, k := *rows, *cols
	xShape, wShape := shapes.Make(dtypes.BFloat16, k), shapes.Make(dtypes.BFloat16, n, k)
	yShape := shapes.Make(dtypes.Float32, n)
	b := stablehlo.New(fmt.Sprintf("gemv_triton%t_loop%t", triton, loop))
	fn := b.Main()
	x := must(fn.NamedInput("x", xShape))
	w := must(fn.NamedInput("w", wShape))
	gemv := func(x, w *stablehlo.Value) *stablehlo.Value {
		if triton {
			return must(tritonCall("gemv", gemvTTIR(k), n/gemvBlockN, 4, 3,
				[]*stablehlo.Value{x, w}, yShape))[0]
		}
		return must(stablehlo.DotGeneral(w, []int{1}, nil, x, []int{0}, nil).OutputDType(dtypes.Float32).Done())
	}
	if !loop {
		check("gemv return", fn.Return(gemv(x, w)))
		return b
	}
	i0 := must(fn.ConstantFromScalar(int32(0)))
	// inputs declares a closure's loop state: the counter, x and W.
	inputs := func(f *stablehlo.Function) (i, x, w *stablehlo.Value) {
		return must(f.Input(i0.Shape())), must(f.Input(xShape)), must(f.Input(wShape))
	}
	cond := fn.Closure()
	ci, _, _ := inputs(cond)
	limit := must(cond.ConstantFromScalar(int32(*iters)))
	check("gemv loop condition", cond.Return(must(
		stablehlo.Compare(ci, limit, types.CompareLT, types.CompareSigned))))
	body := fn.Closure()
	bi, bx, bw := inputs(body)
	head := must(stablehlo.Slice(gemv(bx, bw), []int{0}, []int{k}, nil))
	nextX := must(stablehlo.Convert(head, dtypes.BFloat16))
	one := must(body.ConstantFromScalar(int32(1)))
	nextI := must(stablehlo.Add(bi, one))
	check("gemv loop body", body.Return(nextI, nextX, bw))
	out := must(stablehlo.While(cond, body, i0, x, w))
	check("gemv return", fn.Return(out[1]))
	return b
}

// probeGEMV checks the Triton GEMV against XLA's dot and times both in a loop.
func probeGEMV(client *pjrt.Client) bool {
	n, k := *rows, *cols
	rng := rand.New(rand.NewPCG(7, 8))
	xs := make([]bfloat16.BFloat16, k)
	for i := range xs {
		xs[i] = bfloat16.FromFloat32(rng.Float32()*2 - 1)
	}
	ws := make([]bfloat16.BFloat16, n*k)
	for i := range ws {
		ws[i] = bfloat16.FromFloat32((rng.Float32()*2 - 1) / float32(math.Sqrt(float64(k))))
	}
	inputs, dims := []any{xs, ws}, [][]int{{k}, {n, k}}
	ref, _, err := compileAndRun(client, gemvProgram(false, false), inputs, dims)
	check("XLA's dot", err)
	out, _, err := compileAndRun(client, gemvProgram(true, false), inputs, dims)
	if err != nil {
		fmt.Println("gemv: FAILED:", err)
		return false
	}
	got := out.([]float32)
	worst, scale := 0.0, 0.0
	for i, r := range ref.([]float32) {
		worst = max(worst, math.Abs(float64(got[i]-r)))
		scale = max(scale, math.Abs(float64(r)))
	}
	fmt.Printf("gemv %dx%d: max |triton - xla| / max |xla| = %.1e\n", n, k, worst/scale)
	if worst > 1e-3*scale {
		fmt.Println("gemv: WRONG")
		return false
	}
	bytes := float64(n*k*2 + k*2 + n*4)
	for _, path := range []struct {
		name   string
		triton bool
	}{{"XLA's dot", false}, {"Triton custom call", true}} {
		_, elapsed, err := compileAndRun(client, gemvProgram(path.triton, true), inputs, dims)
		check("gemv loop", err)
		per := elapsed / time.Duration(*iters)
		fmt.Printf("gemv %dx%d, %s: %.2f us per call in a While of %d (median of 5 executions), %.0f GB/s\n",
			n, k, path.name, float64(per.Nanoseconds())/1e3, *iters, bytes/per.Seconds()/1e9)
	}
	return true
}

// compileAndRun compiles b, runs it on the host inputs (flat slices with dims) and
// returns its first output and the median time of 5 executions after a warm-up (each
// timed up to its output's arrival on the host).
func compileAndRun(client *pjrt.Client, b *stablehlo.Builder, flats []any, dims [][]int) (any, time.Duration, error) {
	program, err := b.Build()
	if err != nil {
		return nil, 0, fmt.Errorf("building StableHLO: %w", err)
	}
	exec, err := client.Compile().WithStableHLO(program).Done()
	if err != nil {
		return nil, 0, fmt.Errorf("compiling: %w", err)
	}
	defer func() { _ = exec.Destroy() }()
	var bufs []*pjrt.Buffer
	defer func() {
		for _, buf := range bufs {
			_ = buf.Destroy()
		}
	}()
	for i, flat := range flats {
		buf, err := client.BufferFromHost().FromFlatDataWithDimensions(flat, dims[i]).Done()
		if err != nil {
			return nil, 0, fmt.Errorf("input %d: %w", i, err)
		}
		bufs = append(bufs, buf)
	}
	var out any
	var times []time.Duration
	for run := range 6 {
		start := time.Now()
		results, err := exec.Execute(bufs...).DonateNone().Done()
		if err != nil {
			return nil, 0, fmt.Errorf("executing: %w", err)
		}
		out, _, err = results[0].ToFlatDataAndDimensions()
		for _, r := range results {
			_ = r.Destroy()
		}
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
