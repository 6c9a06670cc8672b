//go:build cgo && !noxla

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// The persistent probe (-persistent): what a chain of dependent 4-row products costs
// per product as one kernel launch each, against one persistent kernel that runs them
// all with a grid-wide barrier between them (an atomic counter its programs spin on).
// A step's layer launches about a dozen kernels, each paying its launch, its loads'
// ramp-up and its last programs' drain (BENCHMARKS.md, "Where our time goes"); a
// kernel that ran a whole layer would pay them once. This measures the price of the
// barrier that such a kernel needs, on the simplest chain: y_l = y_(l-1)·W_lᵀ for L
// weights of MiniCPM5-2B's o shape (2048 × 2048), every product on the same Dot tile
// (one program per 16 rows of W: 128 programs, all resident on the H200's 132 SMs, as
// the barrier needs).

// chainLength is the products of a chain: 16 o-shaped weights, 128 MiB, past L2.
const chainLength = 16

// chainTile is the tile of every product of the chain, both ways.
var chainTile = triton.Tile{BN: 16, BK: 256, Stages: 3, Warps: 4, Dot: true}

// chainTTIR is the persistent kernel of the chain: x [4, k] and W [L, n, k] bfloat16,
// bar [2] int32 (the barrier's counter and its exit counter, zero before and after a
// launch), and ys [L, 4, n] bfloat16, product l's output in slot l. Each phase runs
// the body of package triton's GEMV kernel of tile t (GEMVTTIR, the kernel that the
// chain of launches runs) on phase l's x (x, then slot l-1), W and output slot, then
// waits at the barrier for every program's rows before the next phase reads them.
// n must equal k.
func chainTTIR(n, k int, t triton.Tile) (string, error) {
	if n != k {
		return "", fmt.Errorf("a chain's W [%d, %d] must be square: each product's output is the next one's input", n, k)
	}
	gemv, err := triton.GEMVTTIR(4, n, k, t, dtypes.BFloat16, dtypes.BFloat16)
	if err != nil {
		return "", err
	}
	_, body, ok := strings.Cut(gemv, "attributes {noinline = false} {\n")
	body, _, ok2 := strings.Cut(body, "    tt.return\n")
	if !ok || !ok2 {
		return "", fmt.Errorf("GEMVTTIR's kernel is not one function of one return")
	}
	for _, arg := range []string{"%x", "%w", "%y"} {
		if strings.Count(body, arg+" ") != 1 {
			return "", fmt.Errorf("GEMVTTIR's kernel reads its argument %s other than once", arg)
		}
	}
	body = strings.NewReplacer("%x ", "%chain_x ", "%w ", "%chain_w ", "%y ", "%chain_y ").Replace(body)
	body = "      " + strings.ReplaceAll(strings.TrimSpace(body), "\n", "\n  ")
	programs := n / t.BN
	return strings.NewReplacer("$BODY", body, "$LEN", fmt.Sprint(chainLength), "$GM1", fmt.Sprint(programs-1),
		"$G", fmt.Sprint(programs), "$NK", fmt.Sprint(n*k), "$MN", fmt.Sprint(4*n)).Replace(`module {
  tt.func public @chain(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %bar: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %ys: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %chain_c0 = arith.constant 0 : i32
    %chain_c1 = arith.constant 1 : i32
    %chain_len = arith.constant $LEN : i32
    %chain_g = arith.constant $G : i32
    %chain_gm1 = arith.constant $GM1 : i32
    %chain_nk = arith.constant $NK : i32
    %chain_mn = arith.constant $MN : i32
    %chain_exit = tt.addptr %bar, %chain_c1 : !tt.ptr<i32>, i32
    scf.for %l = %chain_c0 to %chain_len step %chain_c1 : i32 {
      %chain_first = arith.cmpi eq, %l, %chain_c0 : i32
      %chain_x = scf.if %chain_first -> (!tt.ptr<bf16>) {
        scf.yield %x : !tt.ptr<bf16>
      } else {
        %chain_prev = arith.subi %l, %chain_c1 : i32
        %chain_xoff = arith.muli %chain_prev, %chain_mn : i32
        %chain_xp = tt.addptr %ys, %chain_xoff : !tt.ptr<bf16>, i32
        scf.yield %chain_xp : !tt.ptr<bf16>
      }
      %chain_woff = arith.muli %l, %chain_nk : i32
      %chain_w = tt.addptr %w, %chain_woff : !tt.ptr<bf16>, i32
      %chain_yoff = arith.muli %l, %chain_mn : i32
      %chain_y = tt.addptr %ys, %chain_yoff : !tt.ptr<bf16>, i32
$BODY
      gpu.barrier
      %chain_arrived = tt.atomic_rmw add, acq_rel, gpu, %bar, %chain_c1 : (!tt.ptr<i32>, i32) -> i32
      %chain_l1 = arith.addi %l, %chain_c1 : i32
      %chain_target = arith.muli %chain_l1, %chain_g : i32
      %chain_seen = scf.while (%s = %chain_arrived) : (i32) -> i32 {
        %cur = tt.atomic_rmw add, acquire, gpu, %bar, %chain_c0 : (!tt.ptr<i32>, i32) -> i32
        %more = arith.cmpi slt, %cur, %chain_target : i32
        scf.condition(%more) %cur : i32
      } do {
      ^bb0(%c: i32):
        scf.yield %c : i32
      }
      gpu.barrier
    }
    %chain_out = tt.atomic_rmw add, acq_rel, gpu, %chain_exit, %chain_c1 : (!tt.ptr<i32>, i32) -> i32
    %chain_last = arith.cmpi eq, %chain_out, %chain_gm1 : i32
    scf.if %chain_last {
      %r0 = tt.atomic_rmw exch, acq_rel, gpu, %bar, %chain_c0 : (!tt.ptr<i32>, i32) -> i32
      %r1 = tt.atomic_rmw exch, acq_rel, gpu, %chain_exit, %chain_c0 : (!tt.ptr<i32>, i32) -> i32
    }
    tt.return
  }
}`), nil
}

// chainPrograms are the chain's timed loops on x [4, k]: "launches", one kernel of
// chainTile per product over L weight inputs; "persistent", chainTTIR's kernel over the
// weights stacked [L, n, k] and the barrier's counters, an input; "constant", the same
// kernel with its counters a constant of the program, as a kernel that a model's graph
// folds in would have them (XLA allocates a constant once per executable; the kernel
// leaves it zero, as it found it); "xla", XLA's dot per product. Each feeds the
// chain's last output back into x, in a While as gemmPrograms' loops.
func chainPrograms(n, k int) (launches, persistent, constant, xla *stablehlo.Builder) {
	xShape, wShape := shapes.Make(dtypes.BFloat16, 4, k), shapes.Make(dtypes.BFloat16, n, k)
	separate := func(name string, gemm gemmFunc) *stablehlo.Builder {
		return whileProgram(name, xShape, slices.Repeat([]shapes.Shape{wShape}, chainLength),
			func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
				y := x
				for _, w := range ws {
					y = gemm(y, w)
				}
				return feedback(body, x, y)
			})
	}
	launches = separate("chain_launches", tritonGEMM(chainTile))
	xla = separate("chain_xla", xlaGEMM)
	stacked := shapes.Make(dtypes.BFloat16, chainLength, n, k)
	chain := func(body *stablehlo.Function, x, w, bar *stablehlo.Value) *stablehlo.Value {
		ys := must(triton.Kernels{}.Call("chain", must(chainTTIR(n, k, chainTile)), n/chainTile.BN, chainTile.Warps, chainTile.Stages,
			[]*stablehlo.Value{x, w, bar}, shapes.Make(dtypes.BFloat16, chainLength, 4, n)))[0]
		last := must(stablehlo.Slice(ys, []int{chainLength - 1, 0, 0}, []int{chainLength, 4, n}, nil))
		return feedback(body, x, must(stablehlo.Reshape(last, shapes.Make(dtypes.BFloat16, 4, n))))
	}
	persistent = whileProgram("chain_persistent", xShape, []shapes.Shape{stacked, shapes.Make(dtypes.Int32, 2)},
		func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			return chain(body, x, ws[0], ws[1])
		})
	constant = whileProgram("chain_constant", xShape, []shapes.Shape{stacked},
		func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			return chain(body, x, ws[0], must(body.ConstantFromFlatAndDimensions([]int32{0, 0}, 2)))
		})
	return launches, persistent, constant, xla
}

// probePersistent times the chain four ways at MiniCPM5-2B's o shape, checks the
// persistent kernel's outputs against the launches', and prints µs per product.
func probePersistent(client *pjrt.Client) bool {
	const n, k = 2048, 2048
	launches, persistent, constant, xla := chainPrograms(n, k)
	rng := rand.New(rand.NewPCG(13, 14))
	var w []bfloat16.BFloat16
	for range chainLength {
		w = append(w, randomBF16(rng, n*k, float32(math.Sqrt(3/float64(k))))...)
	}
	x := randomBF16(rng, 4*k, 1)
	separate := []*pjrt.Buffer{upload(client, x, 4, k)}
	for l := range chainLength {
		separate = append(separate, upload(client, w[l*n*k:(l+1)*n*k], n, k))
	}
	stacked := []*pjrt.Buffer{upload(client, x, 4, k), upload(client, w, chainLength, n, k), upload(client, []int32{0, 0}, 2)}
	defer destroy(append(separate, stacked...)...)
	fmt.Printf("a chain of %d dependent products y = x·Wᵀ, x [4, %d], W [%d, %d] bf16 (%d MiB in all), tile %v; "+
		"us per product in a While of %d iterations (median of 5 executions)\n", chainLength, k, n, k,
		chainLength*n*k*2>>20, chainTile, *iters)
	ref, elapsed, err := compileAndRun(client, launches, separate...)
	check("the chain of launches", err)
	fmt.Printf("  one launch per product (our Dot tile): %.2f us\n", us(perCall(elapsed, chainLength)))
	if _, elapsed, err := compileAndRun(client, xla, separate...); err != nil {
		failed("the chain on XLA's dots", err)
	} else {
		fmt.Printf("  XLA's dot per product: %.2f us\n", us(perCall(elapsed, chainLength)))
	}
	// The persistent kernel with its counters an input, then a constant (no input).
	for _, c := range []struct {
		name, label string
		program     *stablehlo.Builder
		inputs      []*pjrt.Buffer
	}{
		{"the persistent chain", "one persistent kernel, a grid barrier per product", persistent, stacked},
		{"the persistent chain, its counters a constant", "the same, its counters a constant of the program", constant, stacked[:2]},
	} {
		out, elapsed, err := compileAndRun(client, c.program, c.inputs...)
		if err != nil {
			failed(c.name, err)
			return false
		}
		e := relErr(out.([]bfloat16.BFloat16), ref.([]bfloat16.BFloat16))
		fmt.Printf("  %s: %.2f us (max |persistent - launches| / max |launches| = %.1e)\n", c.label, us(perCall(elapsed, chainLength)), e)
		if !(e <= maxErr) {
			fmt.Printf("  %s: WRONG\n", c.name)
			return false
		}
	}
	return true
}
