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
	"github.com/blockdiff/blockdiff/backend/hlo/triton"
	"github.com/blockdiff/blockdiff/internal/kernels"
)

// build builds a graph of the given inputs on a build-only backend and returns its
// StableHLO text.
func build(t *testing.T, inputs []shapes.Shape, fn func(g *Graph, in []*Node) []*Node) string {
	t.Helper()
	return buildOn(t, hlo.PlainBuildOnly(), inputs, fn)
}

// buildOn is build on the build-only backend b.
func buildOn(t *testing.T, b *hlo.Backend, inputs []shapes.Shape, fn func(g *Graph, in []*Node) []*Node) string {
	t.Helper()
	text, err := tryBuildOn(b, t.Name(), inputs, fn)
	require.NoError(t, err)
	return text
}

// tryBuildOn is buildOn returning the error of a build that fails.
func tryBuildOn(b *hlo.Backend, name string, inputs []shapes.Shape, fn func(g *Graph, in []*Node) []*Node) (string, error) {
	g := NewGraph(b, name)
	err := exceptions.TryCatch[error](func() {
		in := make([]*Node, len(inputs))
		for i, s := range inputs {
			in[i] = Parameter(g, "", s)
		}
		if err := g.Compile(fn(g, in)...); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return "", err
	}
	text, err := hlo.Program(g.Executable())
	return string(text), err
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
// on the last line of its text (see opTexts).
func opResults(text, op string) []string {
	var results []string
	for _, o := range opTexts(text, op) {
		_, after, _ := strings.Cut(o[strings.LastIndex(o, "\n")+1:], ") -> ")
		results = append(results, after)
	}
	return results
}

// opTexts returns the text of every op named op in text: from its line to the first
// line at the op's indentation with its signature, ") -> " (ops with attributes or
// regions span several lines).
func opTexts(text, op string) []string {
	var ops []string
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if !strings.Contains(line, `"stablehlo.`+op+`"`) {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for j, l := range lines[i:] {
			if len(l)-len(strings.TrimLeft(l, " ")) == indent && strings.Contains(l, ") -> ") {
				ops = append(ops, strings.Join(lines[i:i+j+1], "\n"))
				break
			}
		}
	}
	return ops
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
	require.False(t, hlo.PlainBuildOnly().Capabilities().Operations[compute.OpTypeFusedSoftmax])
	text := build(t, []shapes.Shape{f32(2, 7)}, func(g *Graph, in []*Node) []*Node {
		return []*Node{Softmax(in[0], -1)}
	})
	requireOp(t, text, "exponential", "2x7xf32")
}

func TestExecuteFailsWhenBuildOnly(t *testing.T) {
	b := hlo.PlainBuildOnly()
	exec, err := NewExec(b, func(x *Node) *Node { return Neg(x) })
	require.NoError(t, err)
	err = exceptions.TryCatch[error](func() { exec.MustCall([]float32{1, 2}) })
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

// tritonOnly returns a build-only backend with option triton=gemv-all.
func tritonOnly(t *testing.T) *hlo.Backend {
	t.Helper()
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv-all")
	require.NoError(t, err)
	return b
}

// tritonCalls returns the texts of text's custom calls of our Triton kernels.
func tritonCalls(text string) []string {
	var calls []string
	for _, c := range opTexts(text, "custom_call") {
		if strings.Contains(c, `call_target_name = "`+triton.Target+`"`) {
			calls = append(calls, c)
		}
	}
	return calls
}

// tritonCallsWith counts text's Triton calls whose text (their kernel's TTIR included)
// contains signature.
func tritonCallsWith(text, signature string) (n int) {
	for _, c := range tritonCalls(text) {
		if strings.Contains(c, signature) {
			n++
		}
	}
	return n
}

// denseDots splits text's dot_generals into those without batch axes (the dense
// layers: the lowered kind) and those with (attention).
func denseDots(text string) (dense, batched int) {
	for _, d := range opTexts(text, "dot_general") {
		if strings.Contains(d, "lhs_batching_dimensions = []") {
			dense++
		} else {
			batched++
		}
	}
	return dense, batched
}

// Which products are lowered, and how: the rows reshaped to [M, K] and back, the
// output dtype of the dot's config, the tile's K step and grid; everything else stays
// a dot_general.
func TestTritonGEMVLowering(t *testing.T) {
	bf16 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.BFloat16, dims...) }
	// dense is internal/modelcore/linear.go's product, x [..., K] · w [N, K]ᵀ, with output dtype out
	// (InvalidDType: the default, float32 for bf16 operands as GoMLX accumulates them).
	dense := func(out dtypes.DType) func(g *Graph, in []*Node) []*Node {
		return func(g *Graph, in []*Node) []*Node {
			d := Dot(in[0], in[1])
			if out != dtypes.InvalidDType {
				d = d.WithOutputDType(out)
			}
			return []*Node{d.General([]int{in[0].Rank() - 1}, nil, []int{1}, nil)}
		}
	}
	for _, c := range []struct {
		name   string
		inputs []shapes.Shape
		fn     func(g *Graph, in []*Node) []*Node
		result string   // the Triton call's result, "" if not lowered
		want   []string // in the program
	}{
		{"4 rows, float32 output", []shapes.Shape{bf16(1, 4, 64), bf16(96, 64)}, dense(dtypes.Float32), "4x96xf32",
			[]string{"tensor<1x4x64xbf16>) -> tensor<4x64xbf16>", "tensor<4x96xf32>) -> tensor<1x4x96xf32>",
				"grid_x = 12 : i32", "%cBK = arith.constant 64 : i32", "!tt.ptr<f32>"}},
		{"1 row, bf16 output", []shapes.Shape{bf16(2048), bf16(256, 2048)}, dense(dtypes.BFloat16), "1x256xbf16",
			[]string{"tensor<1x256xbf16>) -> tensor<256xbf16>", "grid_x = 32 : i32", "%cBK = arith.constant 512 : i32",
				"arith.truncf"}},
		{"3 rows, default output", []shapes.Shape{bf16(3, 6144), bf16(2048, 6144)}, dense(dtypes.InvalidDType), "3x2048xf32",
			[]string{"%cBK = arith.constant 256 : i32", "num_stages = 3 : i32"}},
		{"K step halved to 32", []shapes.Shape{bf16(2, 2, 160), bf16(40, 160)}, dense(dtypes.Float32), "4x40xf32",
			[]string{"%cBK = arith.constant 32 : i32", "grid_x = 5 : i32"}},
		{"batch axes", []shapes.Shape{bf16(2, 3, 64), bf16(2, 96, 64)}, func(g *Graph, in []*Node) []*Node {
			return []*Node{DotGeneral(in[0], []int{2}, []int{0}, in[1], []int{2}, []int{0})}
		}, "", nil},
		{"8 rows", []shapes.Shape{bf16(2, 4, 128), bf16(96, 128)}, dense(dtypes.Float32), "8x96xf32",
			[]string{"tensor<2x4x128xbf16>) -> tensor<8x128xbf16>", "%cBK = arith.constant 64 : i32", "grid_x = 6 : i32"}},
		{"9 rows", []shapes.Shape{bf16(9, 64), bf16(96, 64)}, dense(dtypes.Float32), "", nil},
		{"float32 operands", []shapes.Shape{f32(4, 64), f32(96, 64)}, dense(dtypes.Float32), "", nil},
		{"K not a multiple of 16", []shapes.Shape{bf16(4, 24), bf16(96, 24)}, dense(dtypes.Float32), "", nil},
		{"N not a multiple of 8: 32 rows ours, 4 XLA's", []shapes.Shape{bf16(4, 64), bf16(36, 64)}, dense(dtypes.Float32), "4x32xf32",
			[]string{"grid_x = 4 : i32", "(tensor<4x32xf32>, tensor<4x4xf32>) -> tensor<4x36xf32>"}},
		{"N under a tile", []shapes.Shape{bf16(4, 64), bf16(6, 64)}, dense(dtypes.Float32), "", nil},
		{"float16 output", []shapes.Shape{bf16(4, 64), bf16(96, 64)}, dense(dtypes.Float16), "", nil},
		{"w [K, N]", []shapes.Shape{bf16(4, 64), bf16(64, 96)}, func(g *Graph, in []*Node) []*Node {
			return []*Node{Dot(in[0], in[1]).General([]int{1}, nil, []int{0}, nil)}
		}, "", nil},
		{"x contracting its first axis", []shapes.Shape{bf16(64, 4), bf16(96, 64)}, func(g *Graph, in []*Node) []*Node {
			return []*Node{Dot(in[0], in[1]).General([]int{0}, nil, []int{1}, nil)}
		}, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := buildOn(t, tritonOnly(t), c.inputs, c.fn)
			calls := tritonCalls(text)
			if c.result == "" {
				require.Empty(t, calls)
				require.Len(t, opTexts(text, "dot_general"), 1)
				return
			}
			require.Len(t, calls, 1)
			require.Len(t, opTexts(text, "dot_general"), len(opTexts(text, "concatenate")), "XLA's dot only of rows no tile divides")
			requireOp(t, text, "custom_call", c.result)
			for _, w := range c.want {
				require.Contains(t, text, w)
			}
			// The same product without the option is a dot_general of the same result.
			plain := build(t, c.inputs, c.fn)
			require.Empty(t, tritonCalls(plain))
			require.Len(t, opTexts(plain, "dot_general"), 1)
			requireSameSignature(t, text, plain)
		})
	}
}

// requireSameSignature checks that two programs' main functions have the same
// signature.
func requireSameSignature(t *testing.T, a, b string) {
	t.Helper()
	signature := func(text string) string {
		_, main, _ := strings.Cut(text, "func.func @main(")
		s, _, _ := strings.Cut(main, "{\n")
		return s
	}
	require.Equal(t, signature(b), signature(a))
}

// The lowering also applies inside a While's body (the decoder's loops).
func TestTritonGEMVInWhile(t *testing.T) {
	text := buildOn(t, tritonOnly(t), []shapes.Shape{shapes.Make(dtypes.BFloat16, 4, 64), shapes.Make(dtypes.BFloat16, 64, 64)},
		func(g *Graph, in []*Node) []*Node {
			cond := NewClosure(g, func(g *Graph) []*Node {
				x := Parameter(g, "x", in[0].Shape())
				return []*Node{LessThan(ReduceAllSum(ConvertDType(x, dtypes.Float32)), Const(g, float32(100)))}
			})
			body := NewClosure(g, func(g *Graph) []*Node {
				x := Parameter(g, "x", in[0].Shape())
				return []*Node{Dot(x, in[1]).WithOutputDType(dtypes.BFloat16).General([]int{1}, nil, []int{1}, nil)}
			})
			return While(cond, body, in[0])
		})
	require.Len(t, tritonCalls(text), 1, "in:\n%s", text)
}

// triton=gemv lowers only the products our GEMV ran faster than XLA's dot on the H200:
// MiniCPM5-2B's gate/up at 1 row, but not its qkv at 1 row nor its gate/up at 4 rows.
func TestTritonGEMVWhereFaster(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=gemv")
	require.NoError(t, err)
	for _, c := range []struct {
		rows, n int
		lowered bool
	}{{1, 12288, true}, {1, 2560, false}, {4, 12288, false}} {
		text := buildOn(t, b, []shapes.Shape{shapes.Make(dtypes.BFloat16, c.rows, 2048), shapes.Make(dtypes.BFloat16, c.n, 2048)},
			func(g *Graph, in []*Node) []*Node {
				return []*Node{Dot(in[0], in[1]).General([]int{1}, nil, []int{1}, nil)}
			})
		require.Equal(t, c.lowered, len(tritonCalls(text)) == 1, "%+v", c)
	}
}

// With triton=fold, a normed dense layer of one row that the graph names as such
// (kernels.NormedDense) runs as our GEMV with the norm folded in, inside a While's body
// too (the decoder's loops), with its weights read from the enclosing function. The
// same operations unnamed keep their ops: the backend recognises no chain of them. A
// named layer whose product by its factor is never built, or whose norm weight does not
// fit its rows, fails.
func TestTritonFoldInWhile(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=fold")
	require.NoError(t, err)
	f32, bf16 := dtypes.Float32, dtypes.BFloat16
	inputs := []shapes.Shape{shapes.Make(f32, 1, 1, 64), shapes.Make(bf16, 64), shapes.Make(bf16, 128, 64)}
	// normed is model's normedDense; mark names it, complete multiplies its product by
	// its factor.
	normed := func(x, g, gain, w *Node, mark, complete bool) *Node {
		inv := Rsqrt(AddScalar(ReduceAndKeep(Square(x), ReduceMean, -1), 1e-6))
		weighted := Mul(ConvertDType(x, bf16), Reshape(g, 1, 1, 64))
		y := Dot(weighted, w).WithOutputDType(f32).General([]int{2}, nil, []int{1}, nil)
		if mark {
			kernels.Mark(x.Graph(), kernels.NormedDense{X: kernels.Value(x), Gain: kernels.Value(gain),
				Product: kernels.Value(y), Factor: kernels.Value(inv), Eps: 1e-6, Scale: 1})
		}
		if !complete {
			return y
		}
		return Mul(y, inv)
	}
	build := func(mark, complete bool, gain func(in []*Node) *Node) (string, error) {
		return tryBuildOn(b, t.Name(), inputs, func(g *Graph, in []*Node) []*Node {
			cond := NewClosure(g, func(g *Graph) []*Node {
				x := Parameter(g, "x", in[0].Shape())
				return []*Node{LessThan(ReduceAllSum(x), Const(g, float32(100)))}
			})
			body := NewClosure(g, func(g *Graph) []*Node {
				x := Parameter(g, "x", in[0].Shape())
				return []*Node{SliceAxis(normed(x, in[1], gain(in), in[2], mark, complete), -1, AxisRange(0, 64))}
			})
			return While(cond, body, in[0])
		})
	}
	norm := func(in []*Node) *Node { return in[1] }
	text, err := build(true, true, norm)
	require.NoError(t, err)
	require.Equal(t, 1, tritonCallsWith(text, "tt.func public @gemm_norm("))
	text, err = build(false, true, norm)
	require.NoError(t, err)
	require.Zero(t, tritonCallsWith(text, "tt.func public @gemm_norm("), "not named")
	_, err = build(true, false, norm)
	require.ErrorContains(t, err, "never completed")
	_, err = build(true, true, func(in []*Node) *Node { return Slice(in[1], AxisRange(0, 32)) })
	require.ErrorContains(t, err, "must be float32 [..., K] and [K]")
}
