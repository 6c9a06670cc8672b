//go:build cgo && !noxla

package hlo_test

import (
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// build builds a graph of the given inputs on a build-only backend and returns its
// StableHLO text.
func build(t *testing.T, inputs []shapes.Shape, fn func(g *Graph, in []*Node) []*Node) string {
	t.Helper()
	g := NewGraph(hlo.NewBuildOnly(), t.Name())
	err := exceptions.TryCatch[error](func() {
		in := make([]*Node, len(inputs))
		for i, s := range inputs {
			in[i] = Parameter(g, "", s)
		}
		if err := g.Compile(fn(g, in)...); err != nil {
			panic(err)
		}
	})
	require.NoError(t, err)
	text, err := hlo.Program(g.Executable())
	require.NoError(t, err)
	return string(text)
}

// requireOp fails unless text has an op named op (e.g. "gather") whose result types
// include tensor<result> (e.g. result "2x3xf32").
func requireOp(t *testing.T, text, op, result string) {
	t.Helper()
	want := "tensor<" + result + ">"
	for _, got := range opResults(text, op) {
		if strings.Contains(got, want) {
			return
		}
	}
	t.Fatalf("no stablehlo.%s with result %s in:\n%s", op, want, text)
}

// opResults returns the result types of every op named op in text: what follows "->"
// on the first line at the op's indentation, from its own, with a signature (ops with
// attributes or regions span several lines).
func opResults(text, op string) []string {
	var results []string
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if !strings.Contains(line, `"stablehlo.`+op+`"`) {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for _, l := range lines[i:] {
			if len(l)-len(strings.TrimLeft(l, " ")) == indent && strings.Contains(l, ") -> ") {
				_, after, _ := strings.Cut(l, ") -> ")
				results = append(results, after)
				break
			}
		}
	}
	return results
}

func f32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
func i32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Int32, dims...) }

func TestGather(t *testing.T) {
	// An embedding lookup, as the model's: [v, h] at indices [b, w, 1].
	text := build(t, []shapes.Shape{f32(64, 8), i32(2, 3, 1)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{Gather(in[0], in[1])}
	})
	requireOp(t, text, "gather", "2x3x8xf32")
}

func TestScatterSum(t *testing.T) {
	// Rows of updates [4, 8] added into [16, 8] at indices [4, 1].
	text := build(t, []shapes.Shape{f32(16, 8), i32(4, 1), f32(4, 8)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{ScatterSum(in[0], in[1], in[2], false, false)}
	})
	requireOp(t, text, "scatter", "16x8xf32")
	require.Contains(t, text, "stablehlo.add")
}

func TestDotGeneralWithBatchAxes(t *testing.T) {
	// Attention scores: batch axes 0 of both, contracting 3 of lhs with 1 of rhs.
	text := build(t, []shapes.Shape{shapes.Make(dtypes.BFloat16, 2, 3, 4, 5), shapes.Make(dtypes.BFloat16, 2, 5, 6)},
		func(g *Graph, in []*Node) []*Node {
			return []*Node{Dot(in[0], in[1]).WithOutputDType(dtypes.Float32).General([]int{3}, []int{0}, []int{1}, []int{0})}
		})
	requireOp(t, text, "dot_general", "2x3x4x6xf32")
	require.Contains(t, text, "lhs_batching_dimensions = [0]")
	require.Contains(t, text, "rhs_contracting_dimensions = [1]")
}

func TestImplicitBroadcast(t *testing.T) {
	text := build(t, []shapes.Shape{f32(2, 3), f32(1, 3)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{Add(in[0], in[1]), Where(GreaterThan(in[0], in[1]), in[0], ZerosLike(in[0]))}
	})
	requireOp(t, text, "broadcast_in_dim", "2x3xf32")
	requireOp(t, text, "add", "2x3xf32")
	requireOp(t, text, "select", "2x3xf32")
}

func TestReductions(t *testing.T) {
	text := build(t, []shapes.Shape{f32(2, 3, 4), shapes.Make(dtypes.Bool, 2, 5)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{ReduceMax(in[0], 1), ReduceSum(in[0]), ReduceLogicalOr(in[1], -1), ArgMax(in[0], 2, dtypes.Int32)}
	})
	requireOp(t, text, "reduce", "2x4xf32")
	requireOp(t, text, "reduce", "f32")
	requireOp(t, text, "reduce", "2xi1")
	require.Contains(t, text, "stablehlo.maximum")
	require.Contains(t, text, "stablehlo.or")
	// ArgMax reduces (value, index) pairs together.
	requireOp(t, text, "reduce", "2x3xf32>, tensor<2x3xi32")
}

func TestCumSum(t *testing.T) {
	for _, opt := range []CumSumOptions{{}, {Exclusive: true}, {Reverse: true}, {Exclusive: true, Reverse: true}} {
		text := build(t, []shapes.Shape{i32(2, 5)}, func(g *Graph, in []*Node) []*Node {
			return []*Node{CumSum(in[0], 1, &opt)}
		})
		requireOp(t, text, "reduce_window", "2x6xi32")
		requireOp(t, text, "slice", "2x5xi32")
	}
}

func TestWhile(t *testing.T) {
	// A counter and a sum, with a nested loop in the body: GoMLX makes every closure
	// from main, so the inner loop's closures move into the outer body.
	text := build(t, []shapes.Shape{f32(3)}, func(g *Graph, in []*Node) []*Node {
		cond := NewClosure(g, func(g *Graph) []*Node {
			i := Parameter(g, "i", i32())
			_ = Parameter(g, "x", f32(3))
			return []*Node{LessThan(i, Const(g, int32(4)))}
		})
		body := NewClosure(g, func(g *Graph) []*Node {
			i := Parameter(g, "i", i32())
			x := Parameter(g, "x", f32(3))
			innerCond := NewClosure(g, func(g *Graph) []*Node {
				j := Parameter(g, "j", i32())
				return []*Node{LessThan(j, Const(g, int32(2)))}
			})
			innerBody := NewClosure(g, func(g *Graph) []*Node {
				j := Parameter(g, "j", i32())
				return []*Node{Add(j, Const(g, int32(1)))}
			})
			j := While(innerCond, innerBody, Const(g, int32(0)))[0]
			return []*Node{Add(i, j), Add(x, ConvertDType(j, dtypes.Float32))}
		})
		return While(cond, body, Const(g, int32(0)), in[0])
	})
	require.Equal(t, 2, strings.Count(text, "stablehlo.while"), text)
	requireOp(t, text, "while", "i32>, tensor<3xf32")
}

func TestFusedOpsAreDecomposed(t *testing.T) {
	require.False(t, hlo.NewBuildOnly().Capabilities().Operations[compute.OpTypeFusedSoftmax])
	text := build(t, []shapes.Shape{f32(2, 7)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{Softmax(in[0], -1)}
	})
	requireOp(t, text, "exponential", "2x7xf32")
}

func TestExecuteFailsWhenBuildOnly(t *testing.T) {
	b := hlo.NewBuildOnly()
	exec, err := NewExec(b, func(x *Node) *Node { return Neg(x) })
	require.NoError(t, err)
	err = exceptions.TryCatch[error](func() { exec.MustExec([]float32{1, 2}) })
	require.ErrorIs(t, err, hlo.ErrBuildOnly)
}

func TestRandomNormal(t *testing.T) {
	// model.NewRandom's weights: random bits from a [3]uint64 state.
	text := build(t, []shapes.Shape{compute.RNGStateShape}, func(g *Graph, in []*Node) []*Node {
		state, values := RandomNormal(in[0], f32(4, 8))
		return []*Node{state, values}
	})
	requireOp(t, text, "rng_bit_generator", "3xui64>, tensor<4x8xui32")
	requireOp(t, text, "log", "4x8xf32")
}
