//go:build cgo && !noxla

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// The MLP probe (-mlp): the AR step's MLP as one kernel against its two. The step's
// down GEMV finishes 1.4-1.9 µs a layer later after its gate/up GEMV than the PyTorch
// peer's, whose programs load a third of their weight while gate/up still runs
// (BENCHMARKS.md, runs GR and HX); ours, launched early, only crowded the SMs
// gate/up's last programs needed (runs GQ, HA, HB). One kernel can do what launches
// cannot: each of its programs computes its share of gate/up's rows, loads its first
// tiles of the down weight (which nothing writes), and only then waits at a grid
// barrier for every program's gate/up rows (run IE: a barrier costs 0.3 µs more than
// a launch, and its counters may be a constant of the program). The probe times
// MiniCPM5-2B's MLP both ways, over copies of its weights past L2, and checks that
// they agree.

// The MLP's shapes: hidden k, FFN f (gate/up W [2f, k], down W [k, f]).
const mlpK, mlpF = 2048, 6144

// mlpVariant is one tiling of the MLP: gate/up's tile, the down projection's tile and
// K parts, and how many of each program's first K steps of the down W the fused kernel
// loads before its barrier.
type mlpVariant struct {
	gateUp triton.Tile
	down   triton.Tile
	splits int
	peel   int
}

// mlpStep is the AR step's tiling (gemvTiles' at one row: gate/up 8 × 512 in 1536
// programs, down 8 × 512 in 2 parts, 512 programs), the two kernels every variant is
// timed against.
var mlpStep = mlpVariant{triton.Tile{BN: 8, BK: 512, Stages: 3}, triton.Tile{BN: 8, BK: 512, Stages: 3}, 2, 0}

func (v mlpVariant) programs() int { return v.down.Programs(mlpK) * v.splits }

func (v mlpVariant) String() string {
	return fmt.Sprintf("gate/up %v, down %v in %d parts, %d programs, %d W steps before the barrier", v.gateUp, v.down, v.splits, v.programs(), v.peel)
}

// mlpVariants are the tilings timed: the step's with nothing loaded before the barrier
// (what the barrier alone costs), then one and two steps loaded, then a down tile of
// half the programs (run IF: all slower than two kernels), and grids of more programs,
// so that more of gate/up's W loads are in flight on each SM as in its own kernel
// (1536 programs, ~9 resident on an SM where the fused kernel's 512 have ~4).
var mlpVariants = []mlpVariant{
	{mlpStep.gateUp, mlpStep.down, 2, 0},
	{mlpStep.gateUp, mlpStep.down, 2, 1},
	{mlpStep.gateUp, mlpStep.down, 2, 2},
	{mlpStep.gateUp, triton.Tile{BN: 16, BK: 256, Stages: 3}, 2, 2},
	{mlpStep.gateUp, mlpStep.down, 3, 1},
	{triton.Tile{BN: 4, BK: 512, Stages: 3}, mlpStep.down, 4, 1},
	{triton.Tile{BN: 16, BK: 256, Stages: 3}, mlpStep.down, 3, 1},
	{mlpStep.gateUp, triton.Tile{BN: 8, BK: 512, Stages: 2}, 3, 1},
}

// mlpNorm is the RMSNorm of the gate/up GEMV: MiniCPM5-2B's mean over 2048 and eps.
var mlpNorm = triton.Norm{InvK: 1.0 / mlpK, Eps: 1e-5}

// mlpSpinLimit bounds a program's polls of the barrier, so that a grid whose
// programs cannot all be resident at once gives wrong sums instead of a hung device.
const mlpSpinLimit = 1 << 22

// kernelBody is a kernel's text between its signature and its return.
func kernelBody(text string) (string, error) {
	_, body, ok := strings.Cut(text, "attributes {noinline = false} {\n")
	body, _, ok2 := strings.Cut(body, "    tt.return\n")
	if !ok || !ok2 {
		return "", fmt.Errorf("a kernel that is not one function of one return")
	}
	return body, nil
}

// ssaValue matches an SSA value's name; valueDefinition a line that defines one.
var (
	ssaValue        = regexp.MustCompile(`%\w+`)
	valueDefinition = regexp.MustCompile(`(?m)^\s*(%\w+) = `)
)

// prefixValues renames every SSA value of body with prefix, but the arguments args
// maps (old name to new).
func prefixValues(body, prefix string, args map[string]string) string {
	return ssaValue.ReplaceAllStringFunc(body, func(v string) string {
		if a, ok := args[v]; ok {
			return a
		}
		return "%" + prefix + v[1:]
	})
}

// The marks of package triton's kernel texts where, under PDL, a kernel waits and lets
// the next one launch (triton.Kernels.PDL), as that package writes them.
const (
	pdlWait   = "    // pdl: wait for the kernels before this one\n"
	pdlLaunch = "    // pdl: let the next kernel launch\n"
)

// mlpTTIR is the kernel @gemm_mlp of variant v: x [1, k] float32 (the residual row),
// g [k] bfloat16 (the MLP norm's weight), W_gu [2f, k] and W_d [k, f] bfloat16, r [1, k]
// float32 and bar [2] int32 (the barrier's counters, zero before and after), writing gu
// [1, 2f] and y [splits, k] float32: y is what GEMVSwiGLUSplitTTIR's kernel of
// GEMVNormTTIR's gu writes. Program p first runs GEMVNormTTIR's body for gate/up tiles
// p, p + P, p + 2P, … (P programs), then loads its first v.peel W tiles of the down
// projection, waits at the barrier for every program's gate/up rows, and runs
// GEMVSwiGLUSplitTTIR's body, its first v.peel steps on the tiles it loaded.
func mlpTTIR(v mlpVariant) (string, error) {
	programs := v.programs()
	guTiles := v.gateUp.Programs(2 * mlpF)
	if guTiles%programs != 0 {
		return "", fmt.Errorf("%d gate/up tiles do not share out over %d programs", guTiles, programs)
	}
	gateUp, err := triton.GEMVNormTTIR(2*mlpF, mlpK, v.gateUp, mlpNorm, triton.Weight{})
	if err != nil {
		return "", err
	}
	down, err := triton.GEMVSwiGLUSplitTTIR(mlpK, mlpF, v.down, v.splits)
	if err != nil {
		return "", err
	}
	first, err := kernelBody(gateUp)
	if err != nil {
		return "", err
	}
	second, err := kernelBody(down)
	if err != nil {
		return "", err
	}
	first = prefixValues(first, "a_", map[string]string{"%x": "%x", "%g": "%g", "%w": "%wgu", "%y": "%gu"})
	second = prefixValues(second, "b_", map[string]string{"%gu": "%gu", "%w": "%wd", "%r": "%r", "%y": "%y"})
	for _, c := range []struct{ text, mark string }{{first, pdlWait}, {first, pdlLaunch}, {second, pdlWait}, {second, pdlLaunch}} {
		if strings.Count(c.text, c.mark) != 1 {
			return "", fmt.Errorf("a kernel's text without its one mark %q", strings.TrimSpace(c.mark))
		}
	}
	const pidLine = "    %a_pid = tt.get_program_id x : i32\n"
	if strings.Count(first, pidLine) != 1 {
		return "", fmt.Errorf("gate/up's kernel does not read its program id once")
	}
	first = strings.NewReplacer(pdlWait, "", pdlLaunch, "", pidLine, "    %a_pid = arith.addi %m_tile, %m_c0 : i32\n").Replace(first)
	second, err = peelBehindBarrier(strings.Replace(second, pdlWait, "", 1), v)
	if err != nil {
		return "", err
	}
	return strings.NewReplacer("$GM1", fmt.Sprint(programs-1), "$G", fmt.Sprint(programs), "$T", fmt.Sprint(guTiles/programs),
		"$LIMIT", fmt.Sprint(mlpSpinLimit)).Replace(`module {
  tt.func public @gemm_mlp(%x: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %wgu: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %wd: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %bar: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %gu: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + pdlWait + `    %m_c0 = arith.constant 0 : i32
    %m_c1 = arith.constant 1 : i32
    %m_G = arith.constant $G : i32
    %m_gm1 = arith.constant $GM1 : i32
    %m_T = arith.constant $T : i32
    %m_limit = arith.constant $LIMIT : i32
    %m_pid = tt.get_program_id x : i32
    %m_exit = tt.addptr %bar, %m_c1 : !tt.ptr<i32>, i32
    scf.for %m_i = %m_c0 to %m_T step %m_c1 : i32 {
      %m_off = arith.muli %m_i, %m_G : i32
      %m_tile = arith.addi %m_pid, %m_off : i32
` + first + `    }
` + second + barrierReset("m_") + `    tt.return
  }
}`), nil
}

// mlpBarrier waits, after every thread of the program has stored its gate/up rows,
// until all $G programs have arrived (or the program has polled $LIMIT times).
const mlpBarrier = `    gpu.barrier
    %m_arrived = tt.atomic_rmw add, acq_rel, gpu, %bar, %m_c1 : (!tt.ptr<i32>, i32) -> i32
    %m_seen:2 = scf.while (%m_s = %m_arrived, %m_n = %m_c0) : (i32, i32) -> (i32, i32) {
      %m_cur = tt.atomic_rmw add, acquire, gpu, %bar, %m_c0 : (!tt.ptr<i32>, i32) -> i32
      %m_short = arith.cmpi slt, %m_cur, %m_G : i32
      %m_inlimit = arith.cmpi slt, %m_n, %m_limit : i32
      %m_more = arith.andi %m_short, %m_inlimit : i1
      scf.condition(%m_more) %m_cur, %m_n : i32, i32
    } do {
    ^bb0(%m_c: i32, %m_n2: i32):
      %m_n3 = arith.addi %m_n2, %m_c1 : i32
      scf.yield %m_c, %m_n3 : i32, i32
    }
    gpu.barrier
`

// downLoopHead matches the head of the split down GEMV's K loop, prefixed b_.
var downLoopHead = regexp.MustCompile(`(?m)^    %b_acc = scf\.for %b_k = %b_kstart to %b_kend step %b_cBK iter_args\(%b_a = %b_zero\) -> \((tensor<\w+>)\) : i32 \{\n`)

// wLoadLines are the lines of the down GEMV's loop body that load its step's W tile
// (package triton's wTile), prefixed b_.
var wLoadLines = []string{"%b_kw = ", "%b_wp = ", "%b_wv = "}

// peelBehindBarrier rewrites the down GEMV's body so that its first v.peel K steps'
// W tiles load before mlpBarrier and those steps run after it, ahead of the loop over
// the remaining steps.
func peelBehindBarrier(body string, v mlpVariant) (string, error) {
	head := downLoopHead.FindStringSubmatchIndex(body)
	if head == nil {
		return "", fmt.Errorf("the down GEMV has no K loop to peel")
	}
	end := strings.Index(body[head[1]:], "\n    }")
	if end < 0 {
		return "", fmt.Errorf("the down GEMV's K loop does not end")
	}
	loopBody := body[head[1] : head[1]+end+1]
	yieldAt := strings.LastIndex(loopBody, "      scf.yield ")
	if yieldAt < 0 || strings.TrimSpace(loopBody[yieldAt:]) != "scf.yield %b_a1 : "+body[head[2]:head[3]] {
		return "", fmt.Errorf("the down GEMV's K loop does not yield its one accumulator")
	}
	var loads, rest []string
	for line := range strings.Lines(loopBody[:yieldAt]) {
		isLoad := false
		for _, l := range wLoadLines {
			isLoad = isLoad || strings.HasPrefix(strings.TrimSpace(line), l)
		}
		if isLoad {
			loads = append(loads, line)
		} else {
			rest = append(rest, line)
		}
	}
	if len(loads) != len(wLoadLines) {
		return "", fmt.Errorf("the down GEMV's K loop loads its W tile in %d lines, not %d", len(loads), len(wLoadLines))
	}
	// The values the loop's body defines: each peeled step has its own, suffixed.
	defined := map[string]bool{}
	for _, m := range valueDefinition.FindAllStringSubmatch(loopBody[:yieldAt], -1) {
		defined[m[1]] = true
	}
	var before, after strings.Builder
	acc := "%b_zero"
	for j := range v.peel {
		step := fmt.Sprintf("%%b_k_%d", j)
		fmt.Fprintf(&before, "    %s_off = arith.constant %d : i32\n    %s = arith.addi %%b_kstart, %s_off : i32\n", step, j*v.down.BK, step, step)
		rename := func(lines []string) string {
			return ssaValue.ReplaceAllStringFunc(strings.Join(lines, ""), func(s string) string {
				switch {
				case s == "%b_k":
					return step
				case s == "%b_a":
					return acc
				case defined[s]:
					return fmt.Sprintf("%s_%d", s, j)
				}
				return s
			})
		}
		before.WriteString(rename(loads))
		after.WriteString(rename(rest))
		acc = fmt.Sprintf("%%b_a1_%d", j)
	}
	start := fmt.Sprintf("    %%b_kpeel_off = arith.constant %d : i32\n    %%b_kpeel = arith.addi %%b_kstart, %%b_kpeel_off : i32\n", v.peel*v.down.BK)
	loop := strings.Replace(body[head[0]:head[1]], "%b_k = %b_kstart to", "%b_k = %b_kpeel to", 1)
	loop = strings.Replace(loop, "iter_args(%b_a = %b_zero)", "iter_args(%b_a = "+acc+")", 1)
	return body[:head[0]] + before.String() + mlpBarrier + after.String() + start + loop + body[head[1]:], nil
}

// mlpPrograms are the probe's programs for variant v. check: inputs x, g, W_gu, W_d;
// outputs the split down GEMV's parts of the two kernels, then of the fused one.
// separate and fused: inputs x and copies of W_gu and W_d in turns, a While of *iters
// iterations each running the MLP once per copy, x the last part of the one before.
func mlpPrograms(v mlpVariant, copies int) (check, separate, fused *stablehlo.Builder, err error) {
	ir, err := mlpTTIR(v)
	if err != nil {
		return nil, nil, nil, err
	}
	kn := triton.Kernels{PDL: true}
	xShape := shapes.Make(dtypes.Float32, 1, mlpK)
	gShape := shapes.Make(dtypes.BFloat16, mlpK)
	guShape := shapes.Make(dtypes.BFloat16, 2*mlpF, mlpK)
	dShape := shapes.Make(dtypes.BFloat16, mlpK, mlpF)
	twoKernels := func(x, g, wgu, wd *stablehlo.Value) *stablehlo.Value {
		gu := must(kn.GEMVNorm(x, g, wgu, nil, mlpStep.gateUp, mlpNorm))
		return must(kn.GEMVSwiGLUSplit(gu, wd, x, mlpStep.down, mlpStep.splits))
	}
	oneKernel := func(fn *stablehlo.Function, x, g, wgu, wd *stablehlo.Value) *stablehlo.Value {
		bar := must(fn.ConstantFromFlatAndDimensions([]int32{0, 0}, 2))
		outs := must(kn.Call("gemm_mlp", ir, v.programs(), 4, 3, []*stablehlo.Value{x, g, wgu, wd, x, bar},
			shapes.Make(dtypes.Float32, 1, 2*mlpF), shapes.Make(dtypes.Float32, v.splits, mlpK)))
		return outs[1]
	}
	check = stablehlo.New("mlp_check")
	fn := check.Main()
	x, g := must(fn.NamedInput("x", xShape)), must(fn.NamedInput("g", gShape))
	wgu, wd := must(fn.NamedInput("wgu", guShape)), must(fn.NamedInput("wd", dShape))
	if err := fn.Return(twoKernels(x, g, wgu, wd), oneKernel(fn, x, g, wgu, wd)); err != nil {
		return nil, nil, nil, err
	}
	weights := make([]shapes.Shape, 0, 2*copies+1)
	weights = append(weights, gShape)
	for range copies {
		weights = append(weights, guShape, dShape)
	}
	// next is the last part's row: the down product of half of K, without the
	// residual, so that x keeps its scale from layer to layer.
	next := func(parts *stablehlo.Value) *stablehlo.Value {
		splits := parts.Shape().Dimensions[0]
		row := must(stablehlo.Slice(parts, []int{splits - 1, 0}, []int{splits, mlpK}, nil))
		return must(stablehlo.Reshape(row, xShape))
	}
	loop := func(name string, mlp func(fn *stablehlo.Function, x, g, wgu, wd *stablehlo.Value) *stablehlo.Value) *stablehlo.Builder {
		return whileProgram(name, xShape, weights, func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			for c := range copies {
				x = next(mlp(body, x, ws[0], ws[1+2*c], ws[2+2*c]))
			}
			return x
		})
	}
	separate = loop("mlp_separate", func(_ *stablehlo.Function, x, g, wgu, wd *stablehlo.Value) *stablehlo.Value {
		return twoKernels(x, g, wgu, wd)
	})
	fused = loop("mlp_fused", oneKernel)
	return check, separate, fused, nil
}

// must3 returns mlpPrograms' three programs, or exits with its error.
func must3(checkP, separate, fused *stablehlo.Builder, err error) []*stablehlo.Builder {
	check("building the MLP probe's programs", err)
	return []*stablehlo.Builder{checkP, separate, fused}
}

// mlpCopies is how many copies of the MLP's weights (75.5 MB each) a timed loop cycles
// through: well past the H200's 50 MB L2.
const mlpCopies = 4

// probeMLP checks and times each variant's fused kernel against the two kernels.
func probeMLP(client *pjrt.Client) bool {
	rng := rand.New(rand.NewPCG(17, 18))
	x := make([]float32, mlpK)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	g := randomBF16(rng, mlpK, 1)
	inputs := []*pjrt.Buffer{upload(client, x, 1, mlpK), upload(client, g, mlpK)}
	for range mlpCopies {
		inputs = append(inputs, upload(client, randomBF16(rng, 2*mlpF*mlpK, float32(math.Sqrt(3.0/mlpK))), 2*mlpF, mlpK),
			upload(client, randomBF16(rng, mlpK*mlpF, float32(math.Sqrt(3.0/mlpF))), mlpK, mlpF))
	}
	defer destroy(inputs...)
	fmt.Printf("MiniCPM5-2B's MLP at one row (gate/up with the norm, then the split down GEMV with SwiGLU and the residual), "+
		"us per layer in a While of %d iterations over %d copies of its weights (median of 5 executions)\n", *iters, mlpCopies)
	ok := true
	for _, v := range mlpVariants {
		checkP, separate, fused, err := mlpPrograms(v, mlpCopies)
		if err != nil {
			failed(v.String(), err)
			ok = false
			continue
		}
		outs, _, err := compileAndRunAll(client, checkP, inputs[:4]...)
		if err != nil {
			failed(v.String()+", check", err)
			ok = false
			continue
		}
		// A wrong kernel is not timed: one whose barrier never opened spends 4 Mi polls
		// a program on every call.
		if e := relErrF32(sumParts(outs[1].([]float32)), sumParts(outs[0].([]float32))); !(e <= 1e-3) {
			fmt.Printf("  %v: WRONG: max |one - two| / max |two| = %.1e\n", v, e)
			ok = false
			continue
		}
		_, sep, err := compileAndRun(client, separate, inputs...)
		if err != nil {
			failed(v.String()+", two kernels", err)
			ok = false
			continue
		}
		_, one, err := compileAndRun(client, fused, inputs...)
		if err != nil {
			failed(v.String()+", one kernel", err)
			ok = false
			continue
		}
		fmt.Printf("  %v: two kernels %.2f us, one kernel %.2f us\n", v, us(perCall(sep, mlpCopies)), us(perCall(one, mlpCopies)))
	}
	return ok
}

// sumParts is the sum of a split GEMV's parts: rows of mlpK.
func sumParts(parts []float32) []float32 {
	sum := make([]float32, mlpK)
	for i, p := range parts {
		sum[i%mlpK] += p
	}
	return sum
}

// relErrF32 is max |got - ref| / max |ref|, NaN where got has one.
func relErrF32(got, ref []float32) float64 {
	worst, scale := 0.0, 0.0
	for i, r := range ref {
		worst = max(worst, math.Abs(float64(got[i])-float64(r)))
		scale = max(scale, math.Abs(float64(r)))
	}
	return worst / scale
}
