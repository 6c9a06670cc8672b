//go:build cgo && !noxla

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

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
// launch), and ys [L, 4, n] bfloat16, product l's output in slot l. Program p computes
// rows [16p, 16p+16) of W's product in each phase, stores them, and waits at the
// barrier for every program's before the next phase reads them. n must equal k.
func chainTTIR(n, k int, t triton.Tile) string {
	programs := n / t.BN
	return strings.NewReplacer("$LEN", fmt.Sprint(chainLength), "$GM1", fmt.Sprint(programs-1), "$G", fmt.Sprint(programs),
		"$NK", fmt.Sprint(n*k), "$MN", fmt.Sprint(4*n), "$BN", fmt.Sprint(t.BN), "$BK", fmt.Sprint(t.BK),
		"$STAGES", fmt.Sprint(t.Stages), "$N", fmt.Sprint(n), "$K", fmt.Sprint(k)).Replace(`module {
  tt.func public @chain(%x: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %bar: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %ys: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %cL = arith.constant $LEN : i32
    %cK = arith.constant $K : i32
    %cBK = arith.constant $BK : i32
    %cBN = arith.constant $BN : i32
    %cG = arith.constant $G : i32
    %cGm1 = arith.constant $GM1 : i32
    %cNK = arith.constant $NK : i32
    %cMN = arith.constant $MN : i32
    %exitp = tt.addptr %bar, %c1 : !tt.ptr<i32>, i32
    %pid = tt.get_program_id x : i32
    %n0 = arith.muli %pid, %cBN : i32
    %rm = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %mlast = arith.constant dense<3> : tensor<16xi32>
    %rmc = arith.minsi %rm, %mlast : tensor<16xi32>
    %Kr = arith.constant dense<$K> : tensor<16xi32>
    %xrow = arith.muli %rmc, %Kr : tensor<16xi32>
    %xrow2 = tt.expand_dims %xrow {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
    %xrowb = tt.broadcast %xrow2 : tensor<16x1xi32> -> tensor<16x$BKxi32>
    %rk = tt.make_range {end = $BK : i32, start = 0 : i32} : tensor<$BKxi32>
    %rkx = tt.expand_dims %rk {axis = 0 : i32} : tensor<$BKxi32> -> tensor<1x$BKxi32>
    %rkxb = tt.broadcast %rkx : tensor<1x$BKxi32> -> tensor<16x$BKxi32>
    %xoff = arith.addi %xrowb, %rkxb : tensor<16x$BKxi32>
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
    %Nr = arith.constant dense<$N> : tensor<16xi32>
    %yrow = arith.muli %rm, %Nr : tensor<16xi32>
    %yrow2 = tt.expand_dims %yrow {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
    %yrowb = tt.broadcast %yrow2 : tensor<16x1xi32> -> tensor<16x$BNxi32>
    %cols2 = tt.expand_dims %cols {axis = 0 : i32} : tensor<$BNxi32> -> tensor<1x$BNxi32>
    %colsb = tt.broadcast %cols2 : tensor<1x$BNxi32> -> tensor<16x$BNxi32>
    %yoff = arith.addi %yrowb, %colsb : tensor<16x$BNxi32>
    %mr = arith.constant dense<4> : tensor<16xi32>
    %rowok = arith.cmpi slt, %rm, %mr : tensor<16xi32>
    %rowok2 = tt.expand_dims %rowok {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
    %store = tt.broadcast %rowok2 : tensor<16x1xi1> -> tensor<16x$BNxi1>
    %zero = arith.constant dense<0.000000e+00> : tensor<16x$BNxf32>
    scf.for %l = %c0 to %cL step %c1 : i32 {
      %first = arith.cmpi eq, %l, %c0 : i32
      %src = scf.if %first -> (!tt.ptr<bf16>) {
        scf.yield %x : !tt.ptr<bf16>
      } else {
        %lm1 = arith.subi %l, %c1 : i32
        %soff = arith.muli %lm1, %cMN : i32
        %sp = tt.addptr %ys, %soff : !tt.ptr<bf16>, i32
        scf.yield %sp : !tt.ptr<bf16>
      }
      %xbase = tt.splat %src : !tt.ptr<bf16> -> tensor<16x$BKx!tt.ptr<bf16>>
      %xp0 = tt.addptr %xbase, %xoff : tensor<16x$BKx!tt.ptr<bf16>>, tensor<16x$BKxi32>
      %wl0 = arith.muli %l, %cNK : i32
      %wl = tt.addptr %w, %wl0 : !tt.ptr<bf16>, i32
      %wbase = tt.splat %wl : !tt.ptr<bf16> -> tensor<$BKx$BNx!tt.ptr<bf16>>
      %wp0 = tt.addptr %wbase, %woff : tensor<$BKx$BNx!tt.ptr<bf16>>, tensor<$BKx$BNxi32>
      %acc = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero) -> (tensor<16x$BNxf32>) : i32 {
        %kx = tt.splat %k : i32 -> tensor<16x$BKxi32>
        %xp = tt.addptr %xp0, %kx : tensor<16x$BKx!tt.ptr<bf16>>, tensor<16x$BKxi32>
        %xv = tt.load %xp : tensor<16x$BKx!tt.ptr<bf16>>
        %kw = tt.splat %k : i32 -> tensor<$BKx$BNxi32>
        %wp = tt.addptr %wp0, %kw : tensor<$BKx$BNx!tt.ptr<bf16>>, tensor<$BKx$BNxi32>
        %wv = tt.load %wp : tensor<$BKx$BNx!tt.ptr<bf16>>
        %d = tt.dot %xv, %wv, %a : tensor<16x$BKxbf16> * tensor<$BKx$BNxbf16> -> tensor<16x$BNxf32>
        scf.yield %d : tensor<16x$BNxf32>
      } {tt.num_stages = $STAGES : i32}
      %yl0 = arith.muli %l, %cMN : i32
      %yl = tt.addptr %ys, %yl0 : !tt.ptr<bf16>, i32
      %ybase = tt.splat %yl : !tt.ptr<bf16> -> tensor<16x$BNx!tt.ptr<bf16>>
      %yp = tt.addptr %ybase, %yoff : tensor<16x$BNx!tt.ptr<bf16>>, tensor<16x$BNxi32>
      %yt = arith.truncf %acc : tensor<16x$BNxf32> to tensor<16x$BNxbf16>
      tt.store %yp, %yt, %store : tensor<16x$BNx!tt.ptr<bf16>>
      gpu.barrier
      %arrived = tt.atomic_rmw add, acq_rel, gpu, %bar, %c1 : (!tt.ptr<i32>, i32) -> i32
      %l1 = arith.addi %l, %c1 : i32
      %target = arith.muli %l1, %cG : i32
      %seen = scf.while (%s = %arrived) : (i32) -> i32 {
        %cur = tt.atomic_rmw add, acquire, gpu, %bar, %c0 : (!tt.ptr<i32>, i32) -> i32
        %more = arith.cmpi slt, %cur, %target : i32
        scf.condition(%more) %cur : i32
      } do {
      ^bb0(%c: i32):
        scf.yield %c : i32
      }
      gpu.barrier
    }
    %out = tt.atomic_rmw add, acq_rel, gpu, %exitp, %c1 : (!tt.ptr<i32>, i32) -> i32
    %last = arith.cmpi eq, %out, %cGm1 : i32
    scf.if %last {
      %r0 = tt.atomic_rmw xchg, acq_rel, gpu, %bar, %c0 : (!tt.ptr<i32>, i32) -> i32
      %r1 = tt.atomic_rmw xchg, acq_rel, gpu, %exitp, %c0 : (!tt.ptr<i32>, i32) -> i32
    }
    tt.return
  }
}`)
}

// chainPrograms are the chain's timed loops on x [4, k]: "launches", one kernel of
// chainTile per product over L weight inputs; "persistent", chainTTIR's kernel over the
// weights stacked [L, n, k] and the barrier's counters; "xla", XLA's dot per product.
// Each feeds the chain's last output back into x, in a While as gemmPrograms' loops.
func chainPrograms(n, k int) (launches, persistent, xla *stablehlo.Builder) {
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
	persistent = whileProgram("chain_persistent", xShape, []shapes.Shape{stacked, shapes.Make(dtypes.Int32, 2)},
		func(body *stablehlo.Function, x *stablehlo.Value, ws []*stablehlo.Value) *stablehlo.Value {
			ys := must(triton.Kernels{}.Call("chain", chainTTIR(n, k, chainTile), n/chainTile.BN, chainTile.Warps, chainTile.Stages,
				[]*stablehlo.Value{x, ws[0], ws[1]}, shapes.Make(dtypes.BFloat16, chainLength, 4, n)))[0]
			last := must(stablehlo.Slice(ys, []int{chainLength - 1, 0, 0}, []int{chainLength, 4, n}, nil))
			return feedback(body, x, must(stablehlo.Reshape(last, shapes.Make(dtypes.BFloat16, 4, n))))
		})
	return launches, persistent, xla
}

// probePersistent times the chain three ways at MiniCPM5-2B's o shape, checks the
// persistent kernel's output against the launches', and prints µs per product.
func probePersistent(client *pjrt.Client) bool {
	const n, k = 2048, 2048
	launches, persistent, xla := chainPrograms(n, k)
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
	perProduct := func(elapsed time.Duration) time.Duration { return elapsed / time.Duration(*iters*chainLength) }
	fmt.Printf("a chain of %d dependent products y = x·Wᵀ, x [4, %d], W [%d, %d] bf16 (%d MiB in all), tile %v; "+
		"us per product in a While of %d iterations (median of 5 executions)\n", chainLength, k, n, k,
		chainLength*n*k*2>>20, chainTile, *iters)
	ref, elapsed, err := compileAndRun(client, launches, separate...)
	check("the chain of launches", err)
	fmt.Printf("  one launch per product (our Dot tile): %.2f us\n", us(perProduct(elapsed)))
	if _, elapsed, err := compileAndRun(client, xla, separate...); err != nil {
		failed("the chain on XLA's dots", err)
	} else {
		fmt.Printf("  XLA's dot per product: %.2f us\n", us(perProduct(elapsed)))
	}
	out, elapsed, err := compileAndRun(client, persistent, stacked...)
	if err != nil {
		failed("the persistent chain", err)
		return false
	}
	e := relErr(out.([]bfloat16.BFloat16), ref.([]bfloat16.BFloat16))
	fmt.Printf("  one persistent kernel, a grid barrier per product: %.2f us (max |persistent - launches| / max |launches| = %.1e)\n",
		us(perProduct(elapsed)), e)
	if !(e <= maxErr) {
		fmt.Println("  persistent chain: WRONG")
		return false
	}
	return true
}
