//go:build cgo && !noxla

package hlo_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/backend/hlo/triton"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

// The tests of this file run programs on a PJRT plugin and compare their results with
// the Go backend's. They need a GPU machine: set BLOCKDIFF_PJRT_PLUGIN to the plugin's
// path (bench/gpu.sh's kernels section does).

// backends returns the hlo backend on the plugin (float32 products at full precision,
// so that results compare with the Go backend's) and the Go backend, or skips. Both are
// shared by the tests of the binary: one client per process.
func backends(t testing.TB) (onPlugin, onGo compute.Backend) {
	t.Helper()
	plugin := os.Getenv(backend.PluginEnv)
	if plugin == "" {
		t.Skipf("needs a PJRT plugin: set %s to its path (e.g. on the GPU machine, bench/gpu.sh kernels)", backend.PluginEnv)
	}
	b, err := sharedBackends()
	require.NoError(t, err)
	return b[0], b[1]
}

var sharedBackends = sync.OnceValues(func() ([2]compute.Backend, error) {
	onPlugin, err := hlo.New(os.Getenv(backend.PluginEnv) + ",notf32,nokernels")
	if err != nil {
		return [2]compute.Backend{}, err
	}
	onGo, err := backend.NewWithConfig(backend.GoConfig)
	return [2]compute.Backend{onPlugin, onGo}, err
})

// tritonBackends returns the hlo backend of backends and one on the same client with
// option triton=gemv-all, or skips.
func tritonBackends(t *testing.T) (plain, lowered compute.Backend) {
	t.Helper()
	plain, _ = backends(t)
	b, err := sharedTriton()
	require.NoError(t, err)
	return plain, b
}

var sharedTriton = sync.OnceValues(func() (*hlo.Backend, error) {
	b, err := sharedBackends()
	if err != nil {
		return nil, err
	}
	return hlo.WithOptions(b[0].(*hlo.Backend), "notf32,triton=gemv-all")
})

// opCase is a graph run on both backends.
type opCase struct {
	name   string
	inputs []any
	fn     func(in []*Node) []*Node
	tol    float64 // the largest |got - want| / max(1, |want|) accepted
	// goFn, if set, replaces fn on the Go backend, for ops it lacks.
	goFn func(in []*Node) []*Node
}

func TestOpsMatchGo(t *testing.T) {
	onPlugin, onGo := backends(t)
	x := [][]float32{{-1.5, 0.25, 2}, {3, -0.5, 0.75}}
	row := [][]float32{{0.5, -2, 1}}
	emb := make([][]float32, 10)
	for i := range emb {
		emb[i] = []float32{float32(i), float32(-i), float32(i) / 4, 1}
	}
	a, b := ramp(2*3*5), ramp(2*5*4)
	cases := []opCase{
		{"elementwise", []any{x, row}, func(in []*Node) []*Node {
			u, v := in[0], in[1]
			return []*Node{Add(u, v), Mul(u, v), Div(u, AddScalar(Abs(v), 1)), Exp(u), Logistic(u), Rsqrt(AddScalar(Abs(u), 1)),
				Log(AddScalar(Abs(u), 1)), Sqrt(Abs(u)), Cos(u), Sin(u), Neg(u), Max(u, v), Min(u, v),
				Where(GreaterThan(u, v), u, v), ConvertDType(LessOrEqual(u, v), dtypes.Int32)}
		}, 1e-6, nil},
		{"integers and bits", []any{[]uint32{0, 1, 0xdeadbeef, 0x80000000, 12345}, []int32{-7, 3, 9, 0, 5}}, func(in []*Node) []*Node {
			u, i := in[0], in[1]
			return []*Node{BitwiseXor(u, BitwiseShiftRightLogicalScalar(u, 3)),
				ConvertDType(LogicalAnd(NotEqual(i, ZerosLike(i)), LogicalNot(GreaterOrEqual(i, OnesLike(i)))), dtypes.Int32),
				Div(i, Const(i.Graph(), int32(2))), Bitcast(ConvertDType(i, dtypes.Float32), dtypes.Uint32)}
		}, 0, nil},
		{"gather", []any{emb, [][]int32{{0, 9, 3}, {3, 3, 7}}}, func(in []*Node) []*Node {
			return []*Node{Gather(in[0], InsertAxes(in[1], -1))}
		}, 0, nil},
		{"scatter sum", []any{[][]int32{{1}, {4}, {1}}, [][]float32{{1, 2}, {3, 4}, {5, 6}}}, func(in []*Node) []*Node {
			return []*Node{ScatterSum(Zeros(in[0].Graph(), f32(6, 2)), in[0], in[1], false, false)}
		}, 1e-6, nil},
		{"dot with batch axes", []any{a, b}, func(in []*Node) []*Node {
			lhs, rhs := Reshape(in[0], 2, 3, 5), Reshape(in[1], 2, 5, 4)
			return []*Node{Dot(lhs, rhs).General([]int{2}, []int{0}, []int{1}, []int{0}),
				Dot(ConvertDType(lhs, dtypes.BFloat16), ConvertDType(rhs, dtypes.BFloat16)).WithOutputDType(dtypes.Float32).
					General([]int{2}, []int{0}, []int{1}, []int{0})}
		}, 2e-2, nil},
		{"reductions", []any{[][]float32{{1, 7, 7, -2}, {-3, -3, 0, 5}}}, func(in []*Node) []*Node {
			u := in[0]
			return []*Node{ReduceMax(u, 1), ReduceMin(u, 0), ReduceSum(u), ConvertDType(ReduceLogicalOr(GreaterThan(u, ZerosLike(u)), 1), dtypes.Int32),
				ArgMax(u, 1, dtypes.Int32), ArgMin(u, 1, dtypes.Int32)}
		}, 1e-6, nil},
		{"cumulative sums", []any{[][]int32{{1, 2, 3, 4, 5}, {-1, 0, 2, 0, 7}}}, func(in []*Node) []*Node {
			var out []*Node
			for _, opt := range []CumSumOptions{{}, {Exclusive: true}, {Reverse: true}, {Exclusive: true, Reverse: true}} {
				out = append(out, CumSum(in[0], 1, &opt))
			}
			return out
		}, 0, nil},
		{"shapes", []any{x}, func(in []*Node) []*Node {
			u := in[0]
			g := u.Graph()
			start := Const(g, int32(1))
			return []*Node{Transpose(u, 0, 1), Reshape(u, 3, 2), Concatenate([]*Node{u, u}, 1), Slice(u, AxisRange(), AxisRange(1, 3)),
				DynamicUpdateSlice(u, Const(g, [][]float32{{9, 9}}), []*Node{start, start}),
				BroadcastToDims(InsertAxes(ConvertDType(Iota(g, i32(3), 0), dtypes.Float32), 0), 2, 3),
				ConvertDType(ConvertDType(u, dtypes.BFloat16), dtypes.Float32)}
		}, 0, nil},
		{"dynamic slice", []any{x, int32(1)}, func(in []*Node) []*Node {
			return []*Node{DynamicSlice(in[0], []*Node{in[1], in[1]}, []int{1, 2})}
		}, 0, func(in []*Node) []*Node { // the Go backend has no DynamicSlice
			return []*Node{Slice(in[0], AxisRange(1, 2), AxisRange(1, 3))}
		}},
		{"while", []any{int32(10)}, func(in []*Node) []*Node {
			g := in[0].Graph()
			cond := NewClosure(g, func(g *Graph) []*Node {
				i := Parameter(g, "i", in[0].Shape())
				_ = Parameter(g, "sum", in[0].Shape())
				n := Parameter(g, "n", in[0].Shape())
				return []*Node{LessOrEqual(i, n)}
			})
			body := NewClosure(g, func(g *Graph) []*Node {
				i := Parameter(g, "i", in[0].Shape())
				sum := Parameter(g, "sum", in[0].Shape())
				n := Parameter(g, "n", in[0].Shape())
				return []*Node{Add(i, Const(g, int32(1))), Add(sum, i), n}
			})
			return While(cond, body, Const(g, int32(1)), Const(g, int32(0)), in[0])[1:2]
		}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goFn := c.fn
			if c.goFn != nil {
				goFn = c.goFn
			}
			got, want := execOnBoth(t, onPlugin, c.fn, onGo, goFn, c.inputs...)
			require.Len(t, got, len(want))
			for i := range want {
				requireClose(t, fmt.Sprintf("output #%d", i), got[i], want[i], c.tol)
			}
		})
	}
}

// execOnBoth runs fnA on backend a and fnB on backend b with the same inputs, moving
// the tensors among them back to the host in between (a tensor lives on one backend).
func execOnBoth(t *testing.T, a compute.Backend, fnA func([]*Node) []*Node, b compute.Backend, fnB func([]*Node) []*Node,
	inputs ...any) (fromA, fromB []*tensors.Tensor) {
	t.Helper()
	fromA, err := ExecOnceN(a, fnA, inputs...)
	require.NoError(t, err)
	for _, in := range inputs {
		if x, ok := in.(*tensors.Tensor); ok {
			require.NoError(t, x.ToLocal())
		}
	}
	fromB, err = ExecOnceN(b, fnB, inputs...)
	require.NoError(t, err)
	return fromA, fromB
}

// ramp is n values i/n - 0.5.
func ramp(n int) []float32 {
	flat := make([]float32, n)
	for i := range flat {
		flat[i] = float32(i)/float32(n) - 0.5
	}
	return flat
}

// requireClose compares two tensors of any dtype as float64s.
func requireClose(t *testing.T, what string, got, want *tensors.Tensor, tol float64) {
	t.Helper()
	require.True(t, got.Shape().Equal(want.Shape()), "%s: shape %s, want %s", what, got.Shape(), want.Shape())
	g, w := float64s(t, got), float64s(t, want)
	for i := range w {
		if d := math.Abs(g[i] - w[i]); !(d <= tol*max(1, math.Abs(w[i]))) {
			t.Fatalf("%s: element %d is %g, want %g (tolerance %g)", what, i, g[i], w[i], tol)
		}
	}
}

// maxAbsDiff is the largest absolute difference between two tensors' elements, as
// float64s.
func maxAbsDiff(t *testing.T, got, want *tensors.Tensor) float64 {
	t.Helper()
	g, w := float64s(t, got), float64s(t, want)
	require.Len(t, g, len(w))
	worst := 0.0
	for i := range w {
		worst = max(worst, math.Abs(g[i]-w[i]))
	}
	return worst
}

func float64s(t *testing.T, x *tensors.Tensor) []float64 {
	t.Helper()
	var out []float64
	add := func(n int, at func(int) float64) {
		for i := range n {
			out = append(out, at(i))
		}
	}
	switch x.DType() {
	case dtypes.Float32:
		v := tensors.MustCopyFlatData[float32](x)
		add(len(v), func(i int) float64 { return float64(v[i]) })
	case dtypes.BFloat16:
		v := tensors.MustCopyFlatData[bfloat16.BFloat16](x)
		add(len(v), func(i int) float64 { return v[i].Float64() })
	case dtypes.Int32:
		v := tensors.MustCopyFlatData[int32](x)
		add(len(v), func(i int) float64 { return float64(v[i]) })
	case dtypes.Uint32:
		v := tensors.MustCopyFlatData[uint32](x)
		add(len(v), func(i int) float64 { return float64(v[i]) })
	default:
		t.Fatalf("no comparison of %s", x.DType())
	}
	return out
}

// testTokens are the prompt of the model comparisons.
var testTokens = []int{1, 5, 9, 17, 33, 2, 8, 11}

// loadModel loads the fixture model of dir on b in dtype, closed when t ends.
func loadModel(t *testing.T, b compute.Backend, dir string, dtype dtypes.DType) *model.Model {
	t.Helper()
	m, err := model.Load(b, dir, model.LoadOptions{DType: dtype})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// The fixture models in float32 give the Go backend's logits, without a cache and
// through a session's cache, and the decoder's greedy tokens in every mode.
func TestModelsMatchGo(t *testing.T) {
	onPlugin, onGo := backends(t)
	tokens := testTokens
	for _, dir := range fixtures.Subdirs(t, "models") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			mp, mg := loadModel(t, onPlugin, dir, dtypes.Float32), loadModel(t, onGo, dir, dtypes.Float32)
			for _, block := range []int{1, 4} {
				got, err := mp.Logits(tokens, block)
				require.NoError(t, err)
				want, err := mg.Logits(tokens, block)
				require.NoError(t, err)
				requireRowsClose(t, fmt.Sprintf("logits, block %d", block), got, want)
			}
			step := func(m *model.Model) [][]float32 {
				s, err := m.NewSession(32, 4)
				require.NoError(t, err)
				defer s.Close()
				_, err = s.Prefill(tokens)
				require.NoError(t, err)
				rows, err := s.Step(tokens[:3])
				require.NoError(t, err)
				return rows
			}
			requireRowsClose(t, "a cached step", step(mp), step(mg))
			if mp.Config.MaskTokenID < 0 {
				return
			}
			for _, mode := range []diffusion.Mode{diffusion.Fused, diffusion.Reference, diffusion.Autoregressive} {
				cfg := diffusion.Quality
				cfg.Mode, cfg.MaxNewTokens = mode, 12
				decode := func(m *model.Model) []int {
					d, err := diffusion.New(m, cfg)
					require.NoError(t, err)
					res, err := d.Generate(context.Background(), tokens[:5])
					require.NoError(t, err)
					return res.Tokens
				}
				require.Equal(t, decode(mg), decode(mp), "greedy tokens in %s mode", mode)
			}
		})
	}
}

// requireRowsClose compares logits rows to 1e-4 of the largest magnitude of want's.
func requireRowsClose(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	requireRowsWithin(t, what, got, want, 1e-4)
}

// requireRowsWithin compares logits rows to tol of the largest magnitude of want's and
// returns the largest difference in those units.
func requireRowsWithin(t *testing.T, what string, got, want [][]float32, tol float64) float64 {
	t.Helper()
	require.Len(t, got, len(want), what)
	scale := 0.0
	for _, r := range want {
		for _, v := range r {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	worst := 0.0
	for i := range want {
		require.Len(t, got[i], len(want[i]), what)
		for j := range want[i] {
			d := math.Abs(float64(got[i][j] - want[i][j]))
			if !(d <= tol*scale) {
				t.Fatalf("%s: row %d, logit %d is %g, want %g", what, i, j, got[i][j], want[i][j])
			}
			worst = max(worst, d/scale)
		}
	}
	return worst
}

// Products lowered to our Triton GEMV give XLA's dot_general of the same operands, for
// 1 to 8 rows, the fixtures' K and MiniCPM5-2B's, and both output dtypes: float32 to
// 1e-4 of the largest output (each bf16 product is exact in float32; only the order of
// the float32 sums differs), bfloat16 to 1e-2 (both round the float32 sums, and a sum on
// the other side of a rounding boundary differs by one bf16 ulp, 2⁻⁸ of its value). One
// program per shape holds every row count and dtype (fewer compilations); it is checked
// to be lowered on a build-only backend first.
func TestTritonGEMVMatchesDot(t *testing.T) {
	plain, lowered := tritonBackends(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ k, n int }{{64, 192}, {160, 48}, {2048, 2560}, {6144, 2048}} {
		t.Run(fmt.Sprintf("k%d_n%d", s.k, s.n), func(t *testing.T) {
			inputs, inputShapes, fn := denseProducts(rng, s.n, s.k)
			text := buildOn(t, tritonOnly(t), inputShapes, func(_ *Graph, in []*Node) []*Node { return fn(in) })
			require.Len(t, tritonCalls(text), denseRows*len(gemvOutputs), "not all lowered")
			got, want := execOnBoth(t, lowered, fn, plain, fn, inputs...)
			requireGEMVTolerances(t, got, want, "triton")
		})
	}
}

// denseRows and gemvOutputs are the most rows of x and the output dtypes of denseProducts.
const denseRows = 8

var gemvOutputs = []dtypes.DType{dtypes.Float32, dtypes.BFloat16}

// denseProducts returns the inputs of products x·Wᵀ (W [n, k] of entries of variance
// 1/k, then x [1, m, k] for m = 1..denseRows, as the model's windows), their shapes,
// and the graph of every x's product in every dtype of gemvOutputs.
func denseProducts(rng *rand.Rand, n, k int) ([]any, []shapes.Shape, func(in []*Node) []*Node) {
	inputs := []any{randomBF16(rng, []int{n, k}, float32(math.Sqrt(3/float64(k))))}
	for m := 1; m <= denseRows; m++ {
		inputs = append(inputs, randomBF16(rng, []int{1, m, k}, 1))
	}
	var inputShapes []shapes.Shape
	for _, in := range inputs {
		inputShapes = append(inputShapes, in.(*tensors.Tensor).Shape())
	}
	return inputs, inputShapes, func(in []*Node) []*Node {
		var ys []*Node
		for _, x := range in[1:] {
			for _, out := range gemvOutputs {
				ys = append(ys, Dot(x, in[0]).WithOutputDType(out).General([]int{2}, nil, []int{1}, nil))
			}
		}
		return ys
	}
}

// requireGEMVTolerances checks denseProducts' results got against XLA's want: float32
// within 1e-4 of the largest output, bfloat16 (rounded after either's float32 sums)
// within 1e-2; what names the lowered side.
func requireGEMVTolerances(t *testing.T, got, want []*tensors.Tensor, what string) {
	t.Helper()
	for i := range want {
		m, out := i/len(gemvOutputs)+1, gemvOutputs[i%len(gemvOutputs)]
		tol := 1e-4
		if out == dtypes.BFloat16 {
			tol = 1e-2
		}
		worst := relativeError(t, got[i], want[i])
		t.Logf("%d rows, %s: max |%s - dot| / max |dot|: %.2g", m, out, what, worst)
		require.LessOrEqual(t, worst, tol, "%d rows, %s", m, out)
	}
}

// FP8 layers (quant's FP8Linear, table decoder) at MiniCPM5-2B's shapes and MiniCPM-2B's
// down projection give XLA's product of the decoded weight, in float32, to 1e-4 of the
// largest output: at 1, 4, 8 and 32 rows our kernels on the bytes, at 64 and 512 XLA's
// GEMM of the bytes as f8E4M3FN, weight-only and W8A8. Both sides multiply exact E4M3
// values and differ only in the order of the float32 sums. XLA's FP8 × FP8 GEMM keeps
// fewer bits under precision HIGHEST (~3e-4 off at K 2048): its bound is 6e-4, which
// cuBLASLt's fast accumulation (~1e-3) would fail. The lowering is checked first on a
// build-only backend, so that it runs without a GPU too.
func TestTritonFP8MatchesDot(t *testing.T) {
	rows := []int{1, 4, 8, 32, 64, 512}
	const ours = 4 // products of up to 32 rows
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []struct{ k, n int }{{2048, 2560}, {6144, 2048}, {5760, 2304}} {
		for _, w8a8 := range []bool{false, true} {
			t.Run(fmt.Sprintf("k%d_n%d_w8a8_%v", s.k, s.n, w8a8), func(t *testing.T) {
				weight := make([]uint8, s.n*s.k)
				for i := range weight {
					weight[i] = uint8(rng.IntN(256))
					if weight[i]&0x7f == 0x7f { // NaN: a finite byte instead
						weight[i]--
					}
				}
				scales := make([]float32, s.n)
				for i := range scales {
					scales[i] = quant.ScaleFromAmax(float32(math.Sqrt(3/float64(s.k))) * (0.5 + rng.Float32()))
				}
				params := []any{tensors.FromFlatDataAndDimensions(weight, s.n, s.k), tensors.FromFlatDataAndDimensions(scales, s.n)}
				if w8a8 {
					params = append(params, tensors.FromScalar(quant.ScaleFromAmax(1)))
				}
				inputs := slices.Clone(params)
				for _, m := range rows {
					inputs = append(inputs, randomBF16(rng, []int{1, m, s.k}, 1))
				}
				layer := &quant.FP8Linear{}
				fn := func(in []*Node) []*Node {
					var ys []*Node
					for _, x := range in[len(params):] {
						ys = append(ys, layer.ApplyFloat32(x, in[:len(params)]))
					}
					return ys
				}
				var inputShapes []shapes.Shape
				for _, in := range inputs {
					inputShapes = append(inputShapes, in.(*tensors.Tensor).Shape())
				}
				text := buildOn(t, tritonOnly(t), inputShapes, func(_ *Graph, in []*Node) []*Node { return fn(in) })
				require.Equal(t, ours, tritonCallsWith(text, "!tt.ptr<f8E4M3FN>"), "our products on the bytes")
				require.Equal(t, ours-1, tritonCallsWith(text, "%pidk = arith.remsi"), "every one of several rows split")
				require.Equal(t, len(rows)-ours, strings.Count(text, fmt.Sprintf("(tensor<%dx%dxui8>) -> tensor<%dx%dxf8E4M3FN>", s.n, s.k, s.n, s.k)),
					"XLA's products of the bytes as f8E4M3FN")
				fp8x, xlaFP8x := 0, 0
				if w8a8 {
					fp8x, xlaFP8x = 2, len(rows)-ours // ours at 4 and 8 rows; XLA's past 32
				}
				require.Equal(t, fp8x, tritonCallsWith(text, "%x: !tt.ptr<f8E4M3FN>"), "FP8 × FP8 products")
				require.Equal(t, xlaFP8x, strings.Count(text, "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"),
					"XLA's FP8 × FP8 products, of precision HIGHEST")

				plain, lowered := tritonBackends(t)
				got, want := execOnBoth(t, lowered, fn, plain, fn, inputs...)
				for i, m := range rows {
					worst := relativeError(t, got[i], want[i])
					bound := 1e-4
					if w8a8 && m > 32 {
						bound = 6e-4
					}
					require.LessOrEqual(t, worst, bound, "%d rows: max |triton - dot| / max |dot|", m)
					t.Logf("%d rows: max |triton - dot| / max |dot|: %.2g", m, worst)
				}
			})
		}
	}
}

// relativeError is max |got - want| / max |want| over two tensors of one shape.
func relativeError(t *testing.T, got, want *tensors.Tensor) float64 {
	t.Helper()
	g, w := float64s(t, got), float64s(t, want)
	require.Len(t, g, len(w))
	scale, worst := 0.0, 0.0
	for _, v := range w {
		scale = max(scale, math.Abs(v))
	}
	for j := range w {
		worst = max(worst, math.Abs(g[j]-w[j])/scale)
	}
	return worst
}

// randomBF16 is a bf16 tensor of dims, uniform in [-scale, scale).
func randomBF16(rng *rand.Rand, dims []int, scale float32) *tensors.Tensor {
	flat := make([]bfloat16.BFloat16, shapes.Make(dtypes.BFloat16, dims...).Size())
	for i := range flat {
		flat[i] = bfloat16.FromFloat32((rng.Float32()*2 - 1) * scale)
	}
	return tensors.FromFlatDataAndDimensions(flat, dims...)
}

// fittingFP8RowTile, fittingFP8DotTile and fittingFP8ManyRowsTile are FP8 tiles of 1,
// of 2 to 16 and of more rows that divide the fixture models' weights (the defaults are
// too large for them); the row tile is pipelined deeper than its loop at K 64, as the
// default is at MiniCPM5-2B's K of 2048 (2 steps of 1024 over 3 stages).
var (
	fittingFP8RowTile      = triton.Tile{BN: 8, BK: 64, Stages: 3}
	fittingFP8DotTile      = triton.Tile{BN: 16, BK: 32, Stages: 1, Dot: true}
	fittingFP8ManyRowsTile = triton.Tile{BN: 32, BK: 32, Stages: 1, Dot: true}
)

// setFittingFP8Tiles gives the backend the fitting FP8 tiles until the returned
// function restores the defaults.
func setFittingFP8Tiles() (restore func()) {
	return hlo.SetFP8Tiles(fittingFP8RowTile, fittingFP8DotTile, fittingFP8ManyRowsTile)
}

// The bf16 fixture models with triton=gemv-all give the plain backend's logits on the
// windows whose dense products it lowers: 4, 8 and 32 tokens without a cache, a 4-token
// prefill (the head at 1 row), and steps of 3 and 1 tokens against the cache. The
// tolerance, 2e-2 of the largest logit, is that of the bf16 fixture tests
// (modelcore.TestFixtureLogitsBFloat16, TestFusedPrefillMatchesPlain): both sides compute
// in bf16 and differ in the order of each product's float32 sums, so an activation
// rounded to bf16 after a product can differ by one bf16 ulp (2⁻⁸ of it), and such
// differences grow through the layers as bf16 rounding does. So do the models with
// their linear layers quantized to FP8 (package quant's defaults: per-channel scales,
// weights decoded by its table), whose GEMVs read the weight bytes themselves (fp8.go)
// where XLA decodes them into bfloat16 first: both multiply x by each byte's exact
// value and sum in float32, in another order. FP8 runs once with the default tiles
// (fitted to the fixtures' weights, fitDotTile: the 32-token window's products run a
// Dot tile of 32 rows; the 64-token window's, XLA's GEMM reading the bytes as
// f8E4M3FN values), once with the smaller tiles of setFittingFP8Tiles. So do the
// models with W8A8 layers (quantizeW8A8), their products of 2 to 8 rows FP8 × FP8
// on the tensor cores, where XLA's decode both sides' bytes and multiply in bfloat16,
// and the 64-token window's in XLA's FP8 × FP8 GEMM.
func TestTritonGEMVModelsMatch(t *testing.T) {
	plain, lowered := tritonBackends(t)
	tokens := testTokens
	long := slices.Repeat(tokens, 4)
	for _, weights := range []string{"bf16", "fp8", "fp8, fitting tiles", "w8a8, fitting tiles"} {
		restore := func() {}
		if strings.HasSuffix(weights, "fitting tiles") {
			restore = setFittingFP8Tiles()
		}
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(weights+"/"+filepath.Base(dir), func(t *testing.T) {
				worst := requireBF16WindowsMatch(t, lowered, plain, dir,
					[]string{"4 tokens", "8 tokens", "32 tokens", "64 tokens", "prefill", "step of 3", "step of 1"},
					func(m *model.Model, add func([][]float32, error)) {
						switch weights {
						case "bf16":
						case "w8a8, fitting tiles":
							require.NoError(t, quantizeW8A8(m))
						default:
							require.NoError(t, quant.QuantizeModel(m, quant.Options{}))
						}
						add(m.Logits(tokens[:4], 4))
						add(m.Logits(tokens[:8], 4))
						add(m.Logits(long, 4))
						add(m.Logits(slices.Repeat(long, 2), 4))
						s, err := m.NewSession(32, 4)
						require.NoError(t, err)
						defer s.Close()
						last, err := s.Prefill(tokens[:4])
						add([][]float32{last}, err)
						add(s.Step(tokens[4:7]))
						add(s.Step(tokens[4:5]))
					})
				t.Logf("max |triton - dot| / max |dot| over the logits: %.2g", worst)
			})
		}
		restore()
	}
}

// The bf16 fixture models with triton=fold (and triton=gemv-all, so that our GEMV
// computes their small products, and triton=pdl, as on CUDA by default, which launches
// them under programmatic dependent launch on Hopper) give the plain backend's logits on the one-row
// windows whose norms and residual adds it folds into our GEMVs (the AR step: a
// session's steps and commits of one token), within TestTritonGEMVModelsMatch's
// tolerance: the kernel rounds x·weight to bf16 as the graph does and sums x² in
// another order. So do the models quantized to FP8 (per channel and per tensor), whose
// folded kernels read the weight bytes, scale each sum and normalise the input first
// (fp8.go), the per-channel ones also with the fitting FP8 tiles; and so do they with
// our attention and options triton=preload, under which the o GEMVs load their weight
// before their wait and the attention lets them launch early, and splitdown=3, under
// which tiny-llama's down GEMVs split their K loop and the GEMVs that read a layer's
// output sum its parts.
func TestTritonFoldModelsMatch(t *testing.T) {
	plain, _ := backends(t)
	withFold, err := sharedTritonFold()
	require.NoError(t, err)
	withSplit, err := hlo.WithOptions(withFold,
		"notf32,triton=gemv-all,triton=fold,triton=pdl,triton=attention,triton=rope,triton=place,triton=preload,splitdown=3")
	require.NoError(t, err)
	tokens := testTokens
	for _, weights := range []string{"bf16", "bf16, preloaded, down split 3 ways", "fp8 per channel", "fp8 per tensor", "fp8 per channel, fitting tile"} {
		if weights == "fp8 per channel, fitting tile" {
			defer setFittingFP8Tiles()()
		}
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(weights+"/"+filepath.Base(dir), func(t *testing.T) {
				folded := withFold
				if weights == "bf16, preloaded, down split 3 ways" {
					// The o GEMVs preloaded after our attention; tiny-llama's down GEMVs
					// split, the others' not (their steps do not divide).
					folded = withSplit
				}
				worst := requireBF16WindowsMatch(t, folded, plain, dir,
					[]string{"step of 1", "commit of 1", "step of 1 after it"},
					func(m *model.Model, add func([][]float32, error)) {
						switch weights {
						case "fp8 per channel", "fp8 per channel, fitting tile":
							require.NoError(t, quant.QuantizeModel(m, quant.Options{Strategy: quant.StrategyChannel}))
						case "fp8 per tensor":
							require.NoError(t, quant.QuantizeModel(m, quant.Options{Strategy: quant.StrategyTensor}))
						}
						s, err := m.NewSession(32, 1)
						require.NoError(t, err)
						defer s.Close()
						_, err = s.Prefill(tokens[:4])
						require.NoError(t, err)
						add(s.Step(tokens[4:5]))
						add(s.Commit(tokens[4:5]))
						add(s.Step(tokens[5:6]))
					})
				t.Logf("max |norm folded - plain| / max |plain| over the logits: %.2g", worst)
			})
		}
	}
}

var sharedTritonFold = sync.OnceValues(func() (*hlo.Backend, error) {
	b, err := sharedBackends()
	if err != nil {
		return nil, err
	}
	return hlo.WithOptions(b[0].(*hlo.Backend), "notf32,triton=gemv-all,triton=fold,triton=pdl")
})

// The bf16 fixture models with triton=attention give the plain backend's logits on
// windows over their cache in their slots, which run our Triton kernels: at batch 1, a
// session's commits of 4 (in place) and of 1 token (in its own slot); at batch 2,
// windows of 8 at different starts committing different lengths, then one-token
// windows; and so with triton=rope, where the kernel rotates the queries itself. The
// tolerance is TestTritonGEMVModelsMatch's.
func TestTritonAttentionModelsMatch(t *testing.T) {
	plain, _ := backends(t)
	withTriton, err := sharedTritonAttention()
	require.NoError(t, err)
	withRope, err := hlo.WithOptions(withTriton, "notf32,triton=attention,triton=pdl,triton=rope")
	require.NoError(t, err)
	tokens := append(slices.Clone(testTokens), testTokens...)
	for _, kernels := range []struct {
		name string
		b    compute.Backend
	}{{"attention", withTriton}, {"attention and rope", withRope}} {
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(kernels.name+"/"+filepath.Base(dir), func(t *testing.T) {
				worst := requireBF16WindowsMatch(t, kernels.b, plain, dir,
					[]string{"commit of 4", "second commit of 4", "commit of 1", "second commit of 1",
						"batch 2, window 8", "batch 2, window 8 over the cache", "batch 2, window 1"},
					func(m *model.Model, add func([][]float32, error)) {
						for _, block := range []int{4, 1} {
							s, err := m.NewSession(32, block)
							require.NoError(t, err)
							defer s.Close()
							_, err = s.Prefill(tokens[:4])
							require.NoError(t, err)
							add(s.Commit(tokens[4 : 4+block]))
							add(s.Commit(tokens[4+block : 4+2*block]))
						}
						batch2 := batch2Windows(t, m, 32)
						add(batch2(8, [2]int32{0, 0}, [2]int32{8, 4}))
						add(batch2(8, [2]int32{8, 4}, [2]int32{8, 8}))
						add(batch2(1, [2]int32{16, 12}, [2]int32{1, 1}))
					})
				t.Logf("max |triton - plain| / max |plain| over the logits: %.2g", worst)
			})
		}
	}
}

// The bf16 fixture models with triton=norm give the plain backend's logits where our
// norm kernel runs the RMSNorms of several rows: a prefill of 12 tokens, then a commit
// of 4, and windows of 8 at batch 2; alone and with the options blockdiff picks on
// CUDA. So do the models quantized to FP8, whose norm kernel returns the normalised
// rows of their layers (RowNorm's Before) and whose commit of 4 multiplies them by
// the bytes in our GEMV. The tolerance is TestTritonGEMVModelsMatch's.
func TestTritonNormModelsMatch(t *testing.T) {
	tokens := append(slices.Clone(testTokens), testTokens...)
	for _, fp8 := range []bool{false, true} {
		requireOptionsMatchPlain(t, []string{"notf32,triton=norm", "notf32,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm"},
			fmt.Sprintf("norm, FP8 %v", fp8), []string{"prefill of 12", "commit of 4", "batch 2, window 8", "batch 2, window 8 over the cache"},
			func(t *testing.T, m *model.Model, add func([][]float32, error)) {
				if fp8 {
					require.NoError(t, quant.QuantizeModel(m, quant.Options{}))
				}
				s, err := m.NewSession(32, 4)
				require.NoError(t, err)
				defer s.Close()
				last, err := s.Prefill(tokens[:12])
				add([][]float32{last}, err)
				add(s.Commit(tokens[12:16]))
				batch2 := batch2Windows(t, m, 32)
				add(batch2(8, [2]int32{0, 0}, [2]int32{8, 4}))
				add(batch2(8, [2]int32{8, 4}, [2]int32{8, 8}))
			})
	}
}

// The bf16 fixture models with triton=place give the plain backend's logits where our
// attention kernel places one-token windows' keys and values itself and writes them
// into the cache: commits of one token in a session, each reading the slots the ones
// before wrote, and windows of one token at batch 2, one of which leaves its second
// row's slot unwritten, which the window after it reads (zero, as the plain path leaves
// it); and steps of 4 tokens at batch 1, which write nothing and whose keys and values
// the kernel places too, where the plain backend concatenates them with the cache; alone
// and with the options blockdiff picks on CUDA. The tolerance is
// TestTritonGEMVModelsMatch's.
func TestTritonPlaceModelsMatch(t *testing.T) {
	tokens := append(slices.Clone(testTokens), testTokens...)
	requireOptionsMatchPlain(t, []string{"notf32,triton=attention,triton=rope,triton=place",
		"notf32,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place"},
		"place", []string{"commit of 1", "second commit of 1", "third commit of 1",
			"batch 2, window 1", "batch 2, window 1, second row unwritten", "batch 2, window 1 after it",
			"step of 4", "step of 4 after a commit"},
		func(t *testing.T, m *model.Model, add func([][]float32, error)) {
			s, err := m.NewSession(32, 1)
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Prefill(tokens[:4])
			require.NoError(t, err)
			for i := range 3 {
				add(s.Commit(tokens[4+i : 5+i]))
			}
			batch2 := batch2Windows(t, m, 32)
			add(batch2(1, [2]int32{16, 12}, [2]int32{1, 1}))
			add(batch2(1, [2]int32{17, 13}, [2]int32{1, 0}))
			add(batch2(1, [2]int32{18, 14}, [2]int32{1, 1}))
			blocks, err := m.NewSession(32, 4)
			require.NoError(t, err)
			defer blocks.Close()
			_, err = blocks.Prefill(tokens[:8])
			require.NoError(t, err)
			add(blocks.Step(tokens[8:12]))
			_, err = blocks.Commit(tokens[8:12])
			require.NoError(t, err)
			add(blocks.Step(tokens[12:16]))
		})
}

// wideHeads returns the plain backend, one on its client with the options blockdiff
// picks on CUDA, and the config of a small random model of MiniCPM5-2B's head shape: two
// layers, vocabulary 512, FFN 512.
func wideHeads(t *testing.T) (plain, lowered compute.Backend, cfg model.Config) {
	t.Helper()
	plain, _ = backends(t)
	lowered, err := hlo.WithOptions(plain.(*hlo.Backend),
		"notf32,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place")
	require.NoError(t, err)
	cfg = model.MiniCPM5_2B
	cfg.NumLayers, cfg.VocabSize, cfg.IntermediateSize, cfg.MaskTokenID = 2, 512, 512, 511
	return plain, lowered, cfg
}

// Our attention kernel places windows of 4 tokens at batch 1 in MiniCPM5-2B's head
// shape too, which no fixture model has: 16 query and 2 key/value heads of 128, so 32
// query rows per key/value head, held by two programs of 16 (triton.Attention's row
// groups). A random-weight model of that shape with two layers gives, with what
// blockdiff picks on CUDA, the plain backend's logits for a window across two splits
// of keys (slots 30 to 33, splits of 32) and one inside a split whose later slots hold
// stale keys, hidden; and for commits of one token over 4608 slots, past the model's
// copy bound, which take their own slot with the option and two products over cache
// and window apart without it (TestTritonPlacePastCopyBound), the second reading the
// key the first wrote. The tolerance is TestTritonGEMVModelsMatch's.
func TestTritonPlaceWideHeadsMatch(t *testing.T) {
	plain, lowered, cfg := wideHeads(t)
	prompt := make([]int32, 30)
	for i := range prompt {
		prompt[i] = int32(testTokens[i%len(testTokens)] + i)
	}
	names := []string{"window at slot 30", "window at slot 16", "commit of 1 at slot 30 of 4608", "commit of 1 at slot 31 of 4608"}
	var embeds [][]bfloat16.BFloat16
	forward := func(b compute.Backend) [][][]float32 {
		m, err := model.NewRandom(b, cfg, dtypes.BFloat16, 7)
		require.NoError(t, err)
		embed, err := tensors.CopyFlatData[bfloat16.BFloat16](modelcore.Of(m).Embed)
		require.NoError(t, err)
		embeds = append(embeds, embed)
		window := batch1Windows(t, m, 64)
		_, err = window(prompt, 0, true)
		require.NoError(t, err)
		var all [][][]float32
		for _, start := range []int32{30, 16} {
			rows, err := window([]int32{5, 9, 17, 511}, start, false)
			require.NoError(t, err)
			all = append(all, rows)
		}
		past := batch1Windows(t, m, 4608)
		_, err = past(prompt, 0, true)
		require.NoError(t, err)
		for i, token := range []int32{5, 9} {
			rows, err := past([]int32{token}, int32(len(prompt)+i), true)
			require.NoError(t, err)
			all = append(all, rows)
		}
		return all
	}
	got, want := forward(lowered), forward(plain)
	require.Equal(t, embeds[1], embeds[0], "the random weights differ between the backends")
	worst := 0.0
	for i, name := range names {
		worst = max(worst, requireRowsWithin(t, name, got[i], want[i], 2e-2))
	}
	t.Logf("max |place - plain| / max |plain| over the logits: %.2g", worst)
}

// batch1Windows returns a function that forwards a window of tokens at batch 1 over a
// cache of capacity slots kept between calls, starting at start (the cache holding the
// slots before it) in blocks of 4 or, with write, of the whole window, written into the
// cache; it returns the window's logits rows.
func batch1Windows(t *testing.T, m *model.Model, capacity int) func(tokens []int32, start int32, write bool) ([][]float32, error) {
	cache, err := modelcore.Of(m).NewCache(1, capacity)
	require.NoError(t, err)
	t.Cleanup(func() { cache.Free() })
	return func(tokens []int32, start int32, write bool) ([][]float32, error) {
		w := len(tokens)
		vec := shapes.Make(dtypes.Int32, 1)
		inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, w), vec}
		for range 2 * m.Config.NumLayers {
			inputs = append(inputs, modelcore.Of(m).CacheShape(1, capacity))
		}
		p, err := modelcore.Of(m).CachedProgram(fmt.Sprintf("test/batch1/%d/%d/%t", capacity, w, write), inputs, func(wt *modelcore.Weights, in []*Node) []*Node {
			win := modelcore.Window{Tokens: in[0], Start: in[1], CacheLen: in[1], BlockSize: 4}
			if write {
				win.WriteLen, win.BlockSize = Const(in[0].Graph(), []int32{int32(w)}), w
			}
			logits, c := modelcore.Of(m).Forward(wt, win, modelcore.CacheNodesFrom(in[2:]), nil)
			if !write {
				return []*Node{logits}
			}
			return append([]*Node{logits}, c.Nodes()...)
		})
		if err != nil {
			return nil, err
		}
		out, err := p.Run(append([]*tensors.Tensor{tensors.FromFlatDataAndDimensions(tokens, 1, w),
			tensors.FromValue([]int32{start})}, cache.Tensors()...)...)
		if err != nil {
			return nil, err
		}
		if write {
			cache.Free()
			cache = modelcore.CacheFromTensors(out[1:])
		}
		return logitsRows(out[0], m.Config.VocabSize)
	}
}

// requireOptionsMatchPlain runs requireBF16WindowsMatch on every fixture model, on the
// plain backend with each of options against the plain backend, each in a subtest
// that run receives, and logs each largest difference under what.
func requireOptionsMatchPlain(t *testing.T, options []string, what string, names []string,
	run func(t *testing.T, m *model.Model, add func([][]float32, error))) {
	t.Helper()
	plain, _ := backends(t)
	for _, o := range options {
		b, err := hlo.WithOptions(plain.(*hlo.Backend), o)
		require.NoError(t, err)
		for _, dir := range fixtures.Subdirs(t, "models") {
			t.Run(o+"/"+filepath.Base(dir), func(t *testing.T) {
				worst := requireBF16WindowsMatch(t, b, plain, dir, names, func(m *model.Model, add func([][]float32, error)) {
					run(t, m, add)
				})
				t.Logf("max |%s - plain| / max |plain| over the logits: %.2g", what, worst)
			})
		}
	}
}

// requireBF16WindowsMatch loads the fixture model of dir in bf16 on got and on want,
// runs the same windows on each (run passes each window's logits rows to add, in the
// order of names), and requires got's within 2e-2 of the largest of want's (see
// TestTritonGEMVModelsMatch). It returns the largest difference in those units.
func requireBF16WindowsMatch(t *testing.T, got, want compute.Backend, dir string, names []string,
	run func(m *model.Model, add func([][]float32, error))) float64 {
	t.Helper()
	windows := func(b compute.Backend) [][][]float32 {
		var all [][][]float32
		run(loadModel(t, b, dir, dtypes.BFloat16), func(rows [][]float32, err error) {
			require.NoError(t, err)
			all = append(all, rows)
		})
		require.Len(t, all, len(names))
		return all
	}
	g, w := windows(got), windows(want)
	worst := 0.0
	for i, name := range names {
		worst = max(worst, requireRowsWithin(t, name, g[i], w[i], 2e-2))
	}
	return worst
}

// batch2Windows returns a function that forwards windows of w testTokens at batch 2
// over a cache of capacity slots kept between calls, row r at starts[r] writing
// writes[r], and returns the logits rows of both rows' windows.
func batch2Windows(t *testing.T, m *model.Model, capacity int) func(w int, starts, writes [2]int32) ([][]float32, error) {
	cache, err := modelcore.Of(m).NewCache(2, capacity)
	require.NoError(t, err)
	t.Cleanup(func() { cache.Free() })
	return func(w int, starts, writes [2]int32) ([][]float32, error) {
		vec := shapes.Make(dtypes.Int32, 2)
		inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 2, w), vec, vec}
		for range 2 * m.Config.NumLayers {
			inputs = append(inputs, modelcore.Of(m).CacheShape(2, capacity))
		}
		p, err := modelcore.Of(m).CachedProgram(fmt.Sprintf("test/batch2/%d/%d", capacity, w), inputs, func(wt *modelcore.Weights, in []*Node) []*Node {
			win := modelcore.Window{Tokens: in[0], Start: in[1], CacheLen: in[1], WriteLen: in[2], BlockSize: 4}
			logits, c := modelcore.Of(m).Forward(wt, win, modelcore.CacheNodesFrom(in[3:]), nil)
			return append([]*Node{logits}, c.Nodes()...)
		})
		if err != nil {
			return nil, err
		}
		ids := make([]int32, 0, 2*w)
		for r := range 2 {
			for i := range w {
				ids = append(ids, int32(testTokens[(r*3+i)%len(testTokens)]))
			}
		}
		out, err := p.Run(append([]*tensors.Tensor{tensors.FromFlatDataAndDimensions(ids, 2, w),
			tensors.FromValue(starts[:]), tensors.FromValue(writes[:])}, cache.Tensors()...)...)
		if err != nil {
			return nil, err
		}
		cache.Free()
		cache = modelcore.CacheFromTensors(out[1:])
		return logitsRows(out[0], m.Config.VocabSize)
	}
}

// logitsRows reads logits to the host as rows of vocab values, one per position.
func logitsRows(logits *tensors.Tensor, vocab int) ([][]float32, error) {
	flat, err := tensors.CopyFlatData[float32](logits)
	if err != nil {
		return nil, err
	}
	rows := make([][]float32, len(flat)/vocab)
	for i := range rows {
		rows[i] = flat[i*vocab : (i+1)*vocab]
	}
	return rows, nil
}

// The fused attention (bf16, on the plugin) gives the plain attention of the same inputs
// computed in float32 on the Go backend: BSHD and BHSD, as many keys as queries and more
// (a window of 1, 4 or 8 queries over its cache), grouped key/value heads, an additive
// bias that hides some keys (0 or -1e30), the same as a boolean mask [b, t, s] (which
// the backend turns into a bias broadcast over the heads) or a causal mask; as cuDNN's,
// and with option triton=attention, where the windows over more keys run our
// Triton kernels at every batch size (under triton=pdl, as on CUDA by default). The tolerance, 1e-2 absolute on outputs within
// [-1, 1], covers bf16's rounding of the output and of the probabilities before their
// product with the values (2⁻⁸ each); a dropped bias, or heads grouped the other way,
// differ by ~0.1 or more.
func TestFusedAttentionMatchesPlain(t *testing.T) {
	onPlugin, onGo := backends(t)
	withTriton, err := sharedTritonAttention()
	require.NoError(t, err)
	for _, kernels := range []struct {
		name string
		b    compute.Backend
	}{{"cuDNN", onPlugin}, {"Triton", withTriton}} {
		t.Run(kernels.name, func(t *testing.T) { fusedAttentionMatchesPlain(t, kernels.b, onGo) })
	}
}

var sharedTritonAttention = sync.OnceValues(func() (*hlo.Backend, error) {
	b, err := sharedBackends()
	if err != nil {
		return nil, err
	}
	return hlo.WithOptions(b[0].(*hlo.Backend), "notf32,triton=attention,triton=pdl")
})

// fusedAttentionMatchesPlain is TestFusedAttentionMatchesPlain on onPlugin.
func fusedAttentionMatchesPlain(t *testing.T, onPlugin, onGo compute.Backend) {
	rng := rand.New(rand.NewPCG(5, 6))
	bshd, bhsd := compute.AttentionAxesLayoutBSHD, compute.AttentionAxesLayoutBHSD
	for _, c := range []struct {
		name                    string
		layout                  compute.AttentionAxesLayout
		b, heads, kvHeads, t, s int
		hide                    string // "bias", "mask", "lengths" (a mask), "causal" or "causal+mask"
		d                       int    // head dimension; 0 is 128
	}{
		{"BSHD prefill with a bias", bshd, 1, 16, 2, 64, 64, "bias", 0},
		{"BSHD prefill with a mask", bshd, 2, 16, 2, 64, 64, "mask", 0},
		{"BSHD causal", bshd, 2, 4, 4, 32, 32, "causal", 0},
		{"BSHD causal with a mask", bshd, 1, 16, 2, 200, 200, "causal+mask", 0},
		{"BHSD 4 queries over 516 keys", bhsd, 1, 16, 2, 4, 516, "bias", 0},
		{"BHSD 8 queries over 24 keys, batch 2", bhsd, 2, 16, 2, 8, 24, "bias", 0},
		{"BHSD 1 query over 513 keys", bhsd, 1, 16, 2, 1, 513, "bias", 0},
		{"BHSD 8 queries over 300 keys, batch 3, rows of different lengths", bhsd, 3, 16, 2, 8, 300, "lengths", 0},
		{"BHSD 1 query over 900 keys, batch 4, rows of different lengths", bhsd, 4, 16, 2, 1, 900, "lengths", 0},
		{"BHSD 4 queries over 70 keys, batch 2, head dimension 64, groups of 2", bhsd, 2, 4, 2, 4, 70, "lengths", 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := cmp.Or(c.d, 128)
			seqDims := func(heads, n int) []int {
				if c.layout == bshd {
					return []int{c.b, n, heads, d}
				}
				return []int{c.b, heads, n, d}
			}
			inputs := []any{randomBF16(rng, seqDims(c.heads, c.t), 1), randomBF16(rng, seqDims(c.kvHeads, c.s), 1),
				randomBF16(rng, seqDims(c.kvHeads, c.s), 1)}
			// query i sees key j unless (3i + 7j) % 5 == 0, and always key 0
			hidden := func(i int) bool { q, k := i/c.s%c.t, i%c.s; return k != 0 && (3*q+7*k)%5 == 0 }
			if c.hide == "lengths" { // row r sees its first s·(r+1)/b keys: whole splits hidden
				hidden = func(i int) bool { r, k := i/(c.t*c.s), i%c.s; return k >= c.s*(r+1)/c.b }
			}
			switch c.hide {
			case "bias":
				bias := make([]bfloat16.BFloat16, c.b*c.heads*c.t*c.s)
				for i := range bias {
					if hidden(i) {
						bias[i] = bfloat16.FromFloat32(-1e30)
					}
				}
				inputs = append(inputs, tensors.FromFlatDataAndDimensions(bias, c.b, c.heads, c.t, c.s))
			case "mask", "lengths", "causal+mask":
				mask := make([]bool, c.b*c.t*c.s)
				for i := range mask {
					mask[i] = !hidden(i)
				}
				inputs = append(inputs, tensors.FromFlatDataAndDimensions(mask, c.b, c.t, c.s))
			}
			fused := func(in []*Node) []*Node {
				cfg := &compute.ScaledDotProductAttentionConfig{Causal: strings.HasPrefix(c.hide, "causal")}
				switch c.hide {
				case "bias":
					cfg.Bias = InternalBackendOutputs(in[3])[0]
				case "mask", "lengths", "causal+mask":
					cfg.Mask = InternalBackendOutputs(in[3])[0]
				}
				out, _ := BackendFusedScaledDotProductAttention(in[0], in[1], in[2], c.layout, cfg)
				return []*Node{ConvertDType(out, dtypes.Float32)}
			}
			plain := func(in []*Node) []*Node {
				toBHSD := func(x *Node) *Node {
					x = ConvertDType(x, dtypes.Float32)
					if c.layout == bshd {
						return TransposeAllAxes(x, 0, 2, 1, 3)
					}
					return x
				}
				group := c.heads / c.kvHeads
				q := Reshape(toBHSD(in[0]), c.b, c.kvHeads, group, c.t, d)
				k, v := toBHSD(in[1]), toBHSD(in[2])
				scores := MulScalar(Dot(q, k).General([]int{4}, []int{0, 1}, []int{3}, []int{0, 1}), 1/math.Sqrt(float64(d))) // [b, kvHeads, group, t, s]
				g := q.Graph()
				causal := Reshape(GreaterOrEqual(Iota(g, shapes.Make(dtypes.Int32, c.t, c.s), 0), Iota(g, shapes.Make(dtypes.Int32, c.t, c.s), 1)), 1, 1, 1, c.t, c.s)
				switch c.hide {
				case "causal":
					scores = Where(BroadcastToShape(causal, scores.Shape()), scores, Infinity(g, dtypes.Float32, -1))
				case "mask", "lengths", "causal+mask":
					seen := Reshape(in[3], c.b, 1, 1, c.t, c.s)
					if c.hide == "causal+mask" {
						seen = LogicalAnd(seen, causal)
					}
					scores = Where(BroadcastToShape(seen, scores.Shape()), scores, Infinity(g, dtypes.Float32, -1))
				default:
					scores = Add(scores, Reshape(ConvertDType(in[3], dtypes.Float32), c.b, c.kvHeads, group, c.t, c.s))
				}
				out := Dot(Softmax(scores, -1), v).General([]int{4}, []int{0, 1}, []int{2}, []int{0, 1}) // [b, kvHeads, group, t, d]
				out = Reshape(out, c.b, c.heads, c.t, d)
				if c.layout == bshd {
					out = TransposeAllAxes(out, 0, 2, 1, 3)
				}
				return []*Node{out}
			}
			got, want := execOnBoth(t, onPlugin, fused, onGo, plain, inputs...)
			worst := maxAbsDiff(t, got[0], want[0])
			t.Logf("max |fused - plain|: %.2g", worst)
			require.LessOrEqual(t, worst, 1e-2)
		})
	}
}

// BenchmarkCuDNNPrefillAttention times cuDNN's attention over a prefill of s tokens in
// MiniCPM5-2B's shape (16 query and 2 key/value heads of 128), chained attentionsInRow
// times per execution so that the execution's own cost is spread over them; it reports
// us/attention, which includes each execution's upload of its inputs: the attention
// kernels' own times are in a profiler's trace. "mask" is the block-causal mask (blocks of 4) as the model gives it,
// which cuDNN gets as a bias and so computes every tile; "causal" is the op's causal
// mask alone, a causal model's prefill (not ours: for scale); "shifted" is the
// block-causal mask through the causal one: the queries padded to start 3 rows down, so
// that the causal mask keeps keys up to 3 past each query and the mask hides the rest,
// and cuDNN skips the tiles past the diagonal.
func BenchmarkCuDNNPrefillAttention(b *testing.B) {
	onPlugin, _ := backends(b)
	const heads, kvHeads, d, block, attentionsInRow = 16, 2, 128, 4, 32
	const shift = block - 1
	rng := rand.New(rand.NewPCG(7, 8))
	for _, s := range []int{512, 2048} {
		for _, variant := range []string{"mask", "causal", "shifted"} {
			b.Run(fmt.Sprintf("%d/%s", s, variant), func(b *testing.B) {
				n := s // rows and keys the op sees
				if variant == "shifted" {
					n = s + block
				}
				mask := make([]bool, n*n)
				for i := range n {
					for j := range n {
						switch q := i - shift; {
						case variant != "shifted":
							mask[i*n+j] = j/block <= i/block
						case q < 0 || q >= s:
							mask[i*n+j] = j == 0 // padding rows: any visible key
						default:
							mask[i*n+j] = j < s && j/block <= q/block
						}
					}
				}
				exec, err := NewExec(onPlugin, func(q, k, v, m *Node) *Node {
					cfg := &compute.ScaledDotProductAttentionConfig{Causal: variant != "mask"}
					if variant != "causal" {
						cfg.Mask = InternalBackendOutputs(m)[0]
					}
					if variant == "shifted" {
						zero := ScalarZero(q.Graph(), q.DType())
						k = Pad(k, zero, compute.PadAxis{}, compute.PadAxis{End: block})
						v = Pad(v, zero, compute.PadAxis{}, compute.PadAxis{End: block})
					}
					for range attentionsInRow {
						if variant == "shifted" {
							q = Pad(q, ScalarZero(q.Graph(), q.DType()), compute.PadAxis{}, compute.PadAxis{Start: shift, End: block - shift})
						}
						q, _ = BackendFusedScaledDotProductAttention(q, k, v, compute.AttentionAxesLayoutBSHD, cfg)
						if variant == "shifted" {
							q = SliceAxis(q, 1, AxisRange(shift, shift+s))
						}
					}
					return ReduceAllSum(ConvertDType(q, dtypes.Float32))
				})
				require.NoError(b, err)
				inputs := []any{randomBF16(rng, []int{1, s, heads, d}, 1), randomBF16(rng, []int{1, s, kvHeads, d}, 1),
					randomBF16(rng, []int{1, s, kvHeads, d}, 1), tensors.FromFlatDataAndDimensions(mask, n, n)}
				run := func() {
					out, err := exec.Call(inputs...)
					require.NoError(b, err)
					_, err = out[0].ValueSafe()
					require.NoError(b, err)
				}
				run()
				b.ResetTimer()
				for range b.N {
					run()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*attentionsInRow), "us/attention")
			})
		}
	}
}

// The fused attention's state is each query's log-sum-exp of its scaled scores
// [b, heads, t], as model's block-causal prefill by parts (mergeLaterKeys) reads it:
// causal, grouped query heads, BSHD.
func TestCuDNNStatsAreLogSumExp(t *testing.T) {
	onPlugin, onGo := backends(t)
	const b, heads, kvHeads, n, d = 2, 16, 2, 200, 128
	rng := rand.New(rand.NewPCG(9, 10))
	scale := 1 / math.Sqrt(d)
	fused := func(in []*Node) []*Node {
		_, states := BackendFusedScaledDotProductAttention(in[0], in[1], in[2], compute.AttentionAxesLayoutBSHD,
			&compute.ScaledDotProductAttentionConfig{Scale: scale, Causal: true})
		require.Len(t, states, 1)
		return []*Node{ConvertDType(states[0], dtypes.Float32)}
	}
	plain := func(in []*Node) []*Node {
		f32 := func(x *Node) *Node { return ConvertDType(x, dtypes.Float32) }
		q := Reshape(f32(in[0]), b, n, kvHeads, heads/kvHeads, d)
		scores := MulScalar(Dot(q, f32(in[1])).General([]int{4}, []int{0, 2}, []int{3}, []int{0, 2}), scale) // [b, kvHeads, t, group, s]
		g := q.Graph()
		seen := GreaterOrEqual(Iota(g, shapes.Make(dtypes.Int32, 1, 1, n, 1, n), 2), Iota(g, shapes.Make(dtypes.Int32, 1, 1, n, 1, n), 4))
		scores = Where(BroadcastToShape(seen, scores.Shape()), scores, Infinity(g, dtypes.Float32, -1))
		top := ReduceAndKeep(scores, ReduceMax, -1)
		lse := Add(Log(ReduceSum(Exp(Sub(scores, top)), -1)), Squeeze(top, -1)) // [b, kvHeads, t, group]
		return []*Node{Reshape(TransposeAllAxes(lse, 0, 1, 3, 2), b, heads, n)}
	}
	got, want := execOnBoth(t, onPlugin, fused, onGo, plain, randomBF16(rng, []int{b, n, heads, d}, 1),
		randomBF16(rng, []int{b, n, kvHeads, d}, 1), randomBF16(rng, []int{b, n, kvHeads, d}, 1))
	worst := maxAbsDiff(t, got[0], want[0])
	t.Logf("max |cuDNN's statistics - log-sum-exp|: %.2g", worst)
	require.LessOrEqual(t, worst, 1e-2)
}

// A parameter named for an output (hlo.InPlaceMarker) lends that output its buffer when
// donated, so that a program fed its own outputs keeps its buffers' addresses; undonated,
// it is copied first and left as it was.
func TestInPlaceOutputTakesDonatedBuffer(t *testing.T) {
	onPlugin, _ := backends(t)
	g := NewGraph(onPlugin, "in_place")
	state := Parameter(g, "state"+hlo.InPlaceMarker+"0", shapes.Make(dtypes.Float32, 1024))
	step := Parameter(g, "step", shapes.Make(dtypes.Float32))
	require.NoError(t, g.Compile(Add(state, step)))
	defer g.Finalize()

	run := func(x *tensors.Tensor, donate bool) (in, out uintptr, result *tensors.Tensor) {
		t.Helper()
		buf, err := x.Buffer(onPlugin, 0)
		if donate {
			buf, err = x.DonateBuffer(onPlugin, 0)
		}
		require.NoError(t, err)
		in, err = hlo.DeviceAddress(buf)
		require.NoError(t, err)
		s, err := tensors.FromScalar(float32(1)).Buffer(onPlugin, 0)
		require.NoError(t, err)
		result = g.RunWithBuffers([]compute.Buffer{buf, s}, []bool{donate, false}, 0)[0]
		outBuf, err := result.Buffer(onPlugin, 0)
		require.NoError(t, err)
		out, err = hlo.DeviceAddress(outBuf)
		require.NoError(t, err)
		return in, out, result
	}
	x := tensors.FromValue(ramp(1024))
	in, out, y := run(x, false)
	require.NotEqual(t, in, out, "undonated, the output needs a buffer of its own")
	require.Equal(t, ramp(1024), tensors.MustCopyFlatData[float32](x), "undonated, the input is left as it was")
	in, out, z := run(y, true)
	require.Equal(t, in, out, "donated, the output is written in place")
	want := ramp(1024)
	for i := range want {
		want[i] = want[i] + 1 + 1 // two executions, each rounding
	}
	require.Equal(t, want, tensors.MustCopyFlatData[float32](z))
}

// BenchmarkExecutionBuffers times executions of a trivial program by the number of its
// input and output buffers (an AR step of the MiniCPM5-2B shape has about 340): PJRT's
// cost per buffer is part of each execution's own cost, which CUDA-graph replays do not
// have. It reports µs/execution, including the read of the first output's 4 bytes.
func BenchmarkExecutionBuffers(b *testing.B) {
	onPlugin, _ := backends(b)
	for _, c := range []struct{ in, out int }{{1, 1}, {85, 1}, {340, 1}, {1, 85}, {340, 85}} {
		b.Run(fmt.Sprintf("in=%d/out=%d", c.in, c.out), func(b *testing.B) {
			exec, err := NewExec(onPlugin, func(xs []*Node) []*Node {
				outs := []*Node{ReduceAllSum(Concatenate(xs, 0))} // one or two kernels, whatever the inputs
				for i := 1; i < c.out; i++ {
					outs = append(outs, AddScalar(xs[0], float64(i)))
				}
				return outs
			})
			require.NoError(b, err)
			inputs := make([]any, c.in)
			for i := range inputs {
				inputs[i] = tensors.FromValue(make([]float32, 256))
			}
			reportPerExecution(b, func() { callAndRead(b, exec, inputs) })
		})
	}
}

// BenchmarkExecutionInPlace times executions of a trivial program that, as the
// decoder's chunks do, reads in constant inputs (the weights) and updates state
// buffers in place (the cache: each donated and written back through
// hlo.InPlaceMarker, fed back the next time). The cases compare one buffer per
// layer's keys and values (84 for MiniCPM5-2B) with one for the whole cache, and ~340
// weight buffers with a dozen, one per kind of weight stacked over the layers: what
// stacking would save each execution. It reports us/execution, which includes the read
// of the first output's 4 bytes.
func BenchmarkExecutionInPlace(b *testing.B) {
	onPlugin, _ := backends(b)
	for _, c := range []struct{ in, state int }{{340, 84}, {340, 1}, {12, 84}, {12, 1}} {
		b.Run(fmt.Sprintf("in=%d/state=%d", c.in, c.state), func(b *testing.B) {
			g := NewGraph(onPlugin, "in_place_state")
			x := shapes.Make(dtypes.Float32, 256)
			var all, updated []*Node
			for i := range c.in {
				all = append(all, Parameter(g, fmt.Sprintf("w%d", i), x))
			}
			for i := range c.state {
				s := Parameter(g, fmt.Sprintf("state%d%s%d", i, hlo.InPlaceMarker, 1+i), x)
				all = append(all, s)
				updated = append(updated, AddScalar(s, 1))
			}
			require.NoError(b, g.Compile(append([]*Node{ReduceAllSum(Concatenate(all, 0))}, updated...)...))
			defer g.Finalize()
			bufs := make([]compute.Buffer, c.in+c.state)
			donate := make([]bool, len(bufs))
			for i := range bufs {
				var err error
				bufs[i], err = tensors.FromValue(make([]float32, 256)).DonateBuffer(onPlugin, 0)
				require.NoError(b, err)
				donate[i] = i >= c.in
			}
			reportPerExecution(b, func() {
				out := g.RunWithBuffers(bufs, donate, 0)
				_, err := out[0].ValueSafe()
				require.NoError(b, err)
				for i, s := range out[1:] {
					bufs[c.in+i], err = s.DonateBuffer(onPlugin, 0)
					require.NoError(b, err)
				}
			})
		})
	}
}

// BenchmarkStackedWeights times one forward's worth of MiniCPM5-2B's layer products
// (qkv, o, gate/up and down in each of 42 layers, bf16 with float32 outputs, each
// layer's input the rounded output of the one before, so that nothing runs out of
// order) on the plain backend, at 1 and 4 rows, with every weight a parameter of its
// own (168) against each kind stacked over the layers ([42, N, K], 4 parameters) and
// sliced per layer. It is the question stacking the model's weights hangs on
// (BenchmarkExecutionInPlace: ~0.7 ms of each execution's own cost): whether XLA reads
// a stacked weight's layer in place, or copies it (3.96 GB a forward, milliseconds).
// It reports us/execution, with the read of one output value.
func BenchmarkStackedWeights(b *testing.B) {
	onPlugin, _ := backends(b)
	const layers, hidden, ffn = 42, 2048, 6144
	kinds := []struct{ n, k int }{{2560, hidden}, {hidden, hidden}, {2 * ffn, hidden}, {hidden, ffn}}
	// A pattern of random values, repeated: every weight reads as random to the GEMMs,
	// and 3.96 GB take a copy, not a random number each.
	rng := rand.New(rand.NewPCG(1, 2))
	pattern := make([]bfloat16.BFloat16, 1<<20)
	for i := range pattern {
		pattern[i] = bfloat16.FromFloat32((rng.Float32()*2 - 1) * 0.02)
	}
	filled := func(dims ...int) *tensors.Tensor {
		flat := make([]bfloat16.BFloat16, shapes.Make(dtypes.BFloat16, dims...).Size())
		for i := 0; i < len(flat); i += len(pattern) {
			copy(flat[i:], pattern)
		}
		return tensors.FromFlatDataAndDimensions(flat, dims...)
	}
	separate := make([]any, 0, layers*len(kinds))
	for range layers {
		for _, w := range kinds {
			separate = append(separate, filled(w.n, w.k))
		}
	}
	stacked := make([]any, len(kinds))
	for i, w := range kinds {
		stacked[i] = filled(layers, w.n, w.k)
	}
	// forward chains the layers' products on x, weight(l, i) giving layer l's weight
	// of kind i: each product's output columns that the next one takes, rounded to bf16.
	forward := func(x *Node, weight func(l, i int) *Node) *Node {
		product := func(x, w *Node, width int) *Node {
			y := Dot(x, w).WithOutputDType(dtypes.Float32).General([]int{1}, nil, []int{1}, nil)
			return ConvertDType(Slice(y, AxisRange(), AxisRange(0, width)), dtypes.BFloat16)
		}
		for l := range layers {
			x = product(x, weight(l, 0), hidden)
			x = product(x, weight(l, 1), hidden)
			x = product(x, weight(l, 2), ffn)
			x = product(x, weight(l, 3), hidden)
		}
		return ReduceAllSum(ConvertDType(x, dtypes.Float32))
	}
	for _, rows := range []int{1, 4} {
		x := filled(rows, hidden)
		for _, c := range []struct {
			name    string
			weights []any
			weight  func(ws []*Node, l, i int) *Node
		}{
			{"separate", separate, func(ws []*Node, l, i int) *Node { return ws[l*len(kinds)+i] }},
			{"stacked", stacked, func(ws []*Node, l, i int) *Node {
				w := ws[i]
				return Reshape(Slice(w, AxisElem(l), AxisRange(), AxisRange()), w.Shape().Dimensions[1:]...)
			}},
		} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, c.name), func(b *testing.B) {
				exec, err := NewExec(onPlugin, func(in []*Node) *Node {
					return forward(in[0], func(l, i int) *Node { return c.weight(in[1:], l, i) })
				})
				require.NoError(b, err)
				inputs := append([]any{x}, c.weights...)
				reportPerExecution(b, func() { callAndRead(b, exec, inputs) })
			})
		}
	}
}

// reportPerExecution runs run once to warm up, then b.N times, and reports
// us/execution.
func reportPerExecution(b *testing.B, run func()) {
	run()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/execution")
}

// callAndRead executes exec on inputs, reads its first output back (so that the time
// covers the device's work) and frees its outputs.
func callAndRead(b *testing.B, exec *Exec, inputs []any) {
	out, err := exec.Call(inputs...)
	require.NoError(b, err)
	_, err = out[0].ValueSafe()
	require.NoError(b, err)
	for _, t := range out {
		_ = t.FinalizeAll()
	}
}

// One-token windows at batch 2 over 4608 slots (past the copy bound) take their own
// slot with what blockdiff picks on CUDA, and give the plain backend's logits, which
// attends over them in their slots (a scatter): a random-weight model of MiniCPM5-2B's
// head shape with two layers, both rows committing, then the second row nothing, then
// both again, each window reading what the ones before wrote. The tolerance is
// TestTritonGEMVModelsMatch's.
func TestTritonPlaceBatch2Match(t *testing.T) {
	plain, lowered, cfg := wideHeads(t)
	names := []string{"both rows commit", "the second row commits nothing", "both again"}
	forward := func(b compute.Backend) [][][]float32 {
		m, err := model.NewRandom(b, cfg, dtypes.BFloat16, 7)
		require.NoError(t, err)
		windows := batch2Windows(t, m, 4608)
		var all [][][]float32
		for _, c := range []struct{ starts, writes [2]int32 }{{[2]int32{16, 12}, [2]int32{1, 1}},
			{[2]int32{17, 13}, [2]int32{1, 0}}, {[2]int32{18, 14}, [2]int32{1, 1}}} {
			rows, err := windows(1, c.starts, c.writes)
			require.NoError(t, err)
			all = append(all, rows)
		}
		return all
	}
	got, want := forward(lowered), forward(plain)
	worst := 0.0
	for i, name := range names {
		worst = max(worst, requireRowsWithin(t, name, got[i], want[i], 2e-2))
	}
	t.Logf("max |own slot - plain| / max |plain| over the logits: %.2g", worst)
}

// A product whose W no GEMV tile divides (4099 rows: 4096 for our GEMV, 3 for XLA's
// dot) gives XLA's dot_general of the same operands, for 1 to 8 rows and both output
// dtypes, to TestTritonGEMVMatchesDot's tolerances. The lowering is checked first,
// without a GPU: a kernel per product, over 4096 rows of W read in place, a dot and a
// concatenation.
func TestTritonRaggedGEMV(t *testing.T) {
	const k = 2048
	inputs, inputShapes, fn := denseProducts(rand.New(rand.NewPCG(9, 10)), 4099, k)
	text := buildOn(t, tritonOnly(t), inputShapes, func(_ *Graph, in []*Node) []*Node { return fn(in) })
	products := denseRows * len(gemvOutputs)
	require.Len(t, tritonCalls(text), products, "not all lowered")
	require.Equal(t, products, strings.Count(text, "stablehlo.dot_general"), "XLA's dot of the rows left")
	require.Equal(t, products, strings.Count(text, "stablehlo.concatenate"))
	require.NotContains(t, text, fmt.Sprintf("-> tensor<4096x%dxbf16>", k), "no slice of W's 4096 rows")

	plain, lowered := tritonBackends(t)
	got, want := execOnBoth(t, lowered, fn, plain, fn, inputs...)
	requireGEMVTolerances(t, got, want, "ragged")
}
