package quant

import (
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	_ "github.com/gomlx/compute/gobackend" // Registers the "go" backend.
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	backendOnce sync.Once
	backendVal  compute.Backend
	backendErr  error
)

// testBackend returns the backend named by $GOMLX_BACKEND, or the Go backend with one
// executor. (XLA is registered only in builds with the xla tag: see xla_test.go.)
func testBackend(tb testing.TB) compute.Backend {
	tb.Helper()
	backendOnce.Do(func() {
		config := os.Getenv(compute.ConfigEnvVar)
		if config == "" {
			config = "go:num_executors=1"
		}
		backendVal, backendErr = compute.NewWithConfig(config)
	})
	require.NoError(tb, backendErr)
	return backendVal
}

// decoders are the in-graph decoders under test.
var decoders = []struct {
	name   string
	decode func(x *graph.Node, dtype dtypes.DType, scale *graph.Node) *graph.Node
}{
	{"bits", DecodeE4M3NodeBits},
	{"lut", DecodeE4M3NodeLUT},
}

var decodeDTypes = []dtypes.DType{dtypes.BFloat16, dtypes.Float16, dtypes.Float32, dtypes.Float64}

// quietNaNBits is the NaN (positive, before the sign is set) each dtype's decode gives.
var quietNaNBits = map[dtypes.DType]uint64{
	dtypes.BFloat16: 0x7fc0,
	dtypes.Float16:  0x7e00,
	dtypes.Float32:  0x7fc00000,
	dtypes.Float64:  0x7ff8000000000000,
}

// roundedBits returns the bits of v rounded once to dtype (v is exact for Float64 and
// rounds from float32 otherwise, which is exact for every E4M3 value).
func roundedBits(dtype dtypes.DType, v float64) uint64 {
	switch dtype {
	case dtypes.BFloat16:
		return uint64(bfloat16.FromFloat32(float32(v)).Bits())
	case dtypes.Float16:
		return uint64(float16.FromFloat32(float32(v)).Bits())
	case dtypes.Float32:
		return uint64(math.Float32bits(float32(v)))
	default:
		return math.Float64bits(v)
	}
}

// tensorBits returns the flat bit patterns of a float tensor.
func tensorBits(tb testing.TB, t *tensors.Tensor) []uint64 {
	tb.Helper()
	var out []uint64
	switch t.DType() {
	case dtypes.BFloat16:
		for _, v := range tensors.MustCopyFlatData[bfloat16.BFloat16](t) {
			out = append(out, uint64(v.Bits()))
		}
	case dtypes.Float16:
		for _, v := range tensors.MustCopyFlatData[float16.Float16](t) {
			out = append(out, uint64(v.Bits()))
		}
	case dtypes.Float32:
		for _, v := range tensors.MustCopyFlatData[float32](t) {
			out = append(out, uint64(math.Float32bits(v)))
		}
	case dtypes.Float64:
		for _, v := range tensors.MustCopyFlatData[float64](t) {
			out = append(out, math.Float64bits(v))
		}
	default:
		tb.Fatalf("unexpected dtype %s", t.DType())
	}
	return out
}

// isNaNBits reports whether bits is a NaN of dtype.
func isNaNBits(dtype dtypes.DType, bits uint64) bool {
	switch dtype {
	case dtypes.BFloat16:
		return bits&0x7f80 == 0x7f80 && bits&0x7f != 0
	case dtypes.Float16:
		return bits&0x7c00 == 0x7c00 && bits&0x3ff != 0
	case dtypes.Float32:
		return math.IsNaN(float64(math.Float32frombits(uint32(bits))))
	default:
		return math.IsNaN(math.Float64frombits(bits))
	}
}

// allBytes returns the 256 bytes, in order, as a [16, 16] tensor.
func allBytes() *tensors.Tensor {
	data := make([]uint8, 256)
	for b := range data {
		data[b] = uint8(b)
	}
	return tensors.FromFlatDataAndDimensions(data, 16, 16)
}

// TestDecodeE4M3NodeFixture decodes all 256 bytes in a graph, with each decoder to each
// dtype, and compares the bits with the fixture's values.
func TestDecodeE4M3NodeFixture(t *testing.T) {
	f := loadE4M3Fixture(t)
	backend := testBackend(t)
	for _, dec := range decoders {
		for _, dtype := range decodeDTypes {
			t.Run(fmt.Sprintf("%s/%s", dec.name, dtype), func(t *testing.T) {
				out, err := graph.CallOnce(backend, func(x *graph.Node) *graph.Node {
					return dec.decode(x, dtype, nil)
				}, allBytes())
				require.NoError(t, err)
				require.Equal(t, dtype, out.DType())
				require.Equal(t, []int{16, 16}, out.Shape().Dimensions)
				got := tensorBits(t, out)
				for b := range 256 {
					v, isNaN := f.expectedDecode(b)
					want := roundedBits(dtype, float64(v))
					if isNaN {
						want = uint64(b>>7)<<(8*dtype.Size()-1) | quietNaNBits[dtype]
					}
					assert.Equal(t, want, got[b], "byte %#02x: want %#x, got %#x", b, want, got[b])
				}
			})
		}
	}
}

// TestDecodeE4M3NodeEncodedRows encodes every fixture input with the Go codec and decodes
// the bytes in a graph: the values must be those of the fixture's bytes.
func TestDecodeE4M3NodeEncodedRows(t *testing.T) {
	f := loadE4M3Fixture(t)
	backend := testBackend(t)
	src := make([]float32, len(f.Rows))
	for i, row := range f.Rows {
		src[i] = math.Float32frombits(row.InputBits)
	}
	for _, saturate := range []bool{false, true} {
		encoded := make([]uint8, len(src))
		EncodeE4M3Slice(encoded, src, 1, saturate)
		for _, dec := range decoders {
			out, err := graph.CallOnce(backend, func(x *graph.Node) *graph.Node {
				return dec.decode(x, dtypes.Float32, nil)
			}, tensors.FromFlatDataAndDimensions(encoded, len(encoded)))
			require.NoError(t, err)
			got := tensorBits(t, out)
			for i, row := range f.Rows {
				b := row.CastByte
				if saturate {
					b = row.SaturatingByte
				}
				v, isNaN := f.expectedDecode(int(b))
				if isNaN {
					assert.True(t, isNaNBits(dtypes.Float32, got[i]), "%s row %d: want NaN", dec.name, i)
					continue
				}
				assert.Equal(t, uint64(math.Float32bits(v)), got[i], "%s saturate=%v row %d", dec.name, saturate, i)
			}
		}
	}
}

// TestDecodeE4M3NodeScale checks per-tensor and per-channel scales: one rounding of the
// float32 (float64 for Float64) product to the output dtype.
func TestDecodeE4M3NodeScale(t *testing.T) {
	backend := testBackend(t)
	table := E4M3DecodeTable()
	channels := make([]float32, 16)
	for i := range channels {
		channels[i] = 0.05 + 0.2371*float32(i)
	}
	full := make([]float32, 256)
	for i := range full {
		full[i] = 0.01 + 0.0131*float32(i)
	}
	cases := []struct {
		name  string
		scale *tensors.Tensor
		at    func(row, col int) float32 // The scale of element [row, col].
	}{
		{"scalar", tensors.FromValue(float32(0.37)), func(int, int) float32 { return 0.37 }},
		{"rows[16,1]", tensors.FromFlatDataAndDimensions(channels, 16, 1), func(r, _ int) float32 { return channels[r] }},
		{"cols[16]", tensors.FromFlatDataAndDimensions(channels, 16), func(_, c int) float32 { return channels[c] }},
		{"cols[1,16]", tensors.FromFlatDataAndDimensions(channels, 1, 16), func(_, c int) float32 { return channels[c] }},
		{"full[16,16]", tensors.FromFlatDataAndDimensions(full, 16, 16), func(r, c int) float32 { return full[r*16+c] }},
	}
	for _, dec := range decoders {
		for _, dtype := range decodeDTypes {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", dec.name, dtype, tc.name), func(t *testing.T) {
					out, err := graph.CallOnce(backend, func(x, scale *graph.Node) *graph.Node {
						return dec.decode(x, dtype, scale)
					}, allBytes(), tc.scale)
					require.NoError(t, err)
					require.Equal(t, dtype, out.DType())
					require.Equal(t, []int{16, 16}, out.Shape().Dimensions)
					got := tensorBits(t, out)
					for b := range 256 {
						s := tc.at(b/16, b%16)
						if math.IsNaN(float64(table[b])) {
							assert.True(t, isNaNBits(dtype, got[b]), "byte %#02x: want NaN, got %#x", b, got[b])
							continue
						}
						want := roundedBits(dtype, float64(table[b]*s))
						if dtype == dtypes.Float64 {
							want = roundedBits(dtype, float64(table[b])*float64(s))
						}
						assert.Equal(t, want, got[b], "byte %#02x scale %g: want %#x, got %#x", b, s, want, got[b])
					}
				})
			}
		}
	}
}

// TestDecodeE4M3NodeScaleDType checks that a bfloat16 scale is widened, not the product
// narrowed twice: bf16 output of bf16 scale equals one rounding of the float32 product.
func TestDecodeE4M3NodeScaleDType(t *testing.T) {
	backend := testBackend(t)
	scale := bfloat16.FromFloat32(0.3)
	out, err := graph.CallOnce(backend, func(x, s *graph.Node) *graph.Node {
		return DecodeE4M3Node(x, dtypes.BFloat16, s)
	}, allBytes(), tensors.FromValue(scale))
	require.NoError(t, err)
	got := tensorBits(t, out)
	for b, v := range E4M3DecodeTable() {
		if !math.IsNaN(float64(v)) {
			assert.Equal(t, roundedBits(dtypes.BFloat16, float64(v*scale.Float32())), got[b], "byte %#02x", b)
		}
	}
}

func TestDecodeE4M3NodeErrors(t *testing.T) {
	backend := testBackend(t)
	g := graph.NewGraph(backend, "errors")
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Uint8, 4, 8))
	xInt8 := graph.Parameter(g, "x_int8", shapes.Make(dtypes.Int8, 4, 8))
	for _, dec := range decoders {
		assert.Panics(t, func() { dec.decode(xInt8, dtypes.Float32, nil) }, "%s: int8 input", dec.name)
		assert.Panics(t, func() { dec.decode(x, dtypes.Int32, nil) }, "%s: int32 output", dec.name)
		for _, dims := range [][]int{{4}, {8, 1}, {2, 4, 8}, {4, 2}} {
			scale := graph.Parameter(g, fmt.Sprintf("%s_scale_%v", dec.name, dims), shapes.Make(dtypes.Float32, dims...))
			assert.Panics(t, func() { dec.decode(x, dtypes.Float32, scale) }, "%s: scale %v", dec.name, dims)
		}
		intScale := graph.Parameter(g, dec.name+"_int_scale", shapes.Make(dtypes.Int32))
		assert.Panics(t, func() { dec.decode(x, dtypes.Float32, intScale) }, "%s: int32 scale", dec.name)
	}
}

// BenchmarkDecodeE4M3Node times the in-graph decoders over a [1024, 1024] byte tensor
// ([8192, 8192] on other backends than the Go one), the decoded values summed to a
// scalar that is read back, so each call finishes and no large output is kept.
func BenchmarkDecodeE4M3Node(b *testing.B) {
	backend := testBackend(b)
	rows, cols := 1024, 1024
	if backend.String() != "go" {
		rows, cols = 8192, 8192
	}
	data := make([]uint8, rows*cols)
	for i := range data {
		data[i] = uint8(i*131) &^ 0x40 // Keep |values| small; no NaN (bit 6 cleared).
	}
	x := tensors.FromFlatDataAndDimensions(data, rows, cols)
	scale := tensors.FromFlatDataAndDimensions(make([]float32, cols), cols)
	for _, dec := range decoders {
		for _, dtype := range []dtypes.DType{dtypes.BFloat16, dtypes.Float32} {
			for _, withScale := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/scale=%v", dec.name, dtype, withScale)
				b.Run(name, func(b *testing.B) {
					exec, err := graph.NewExec(backend, func(x, s *graph.Node) *graph.Node {
						if !withScale {
							s = nil
						}
						return graph.ReduceAllSum(graph.ConvertDType(dec.decode(x, dtype, s), dtypes.Float32))
					})
					require.NoError(b, err)
					defer exec.Finalize()
					run := func() {
						out, err := exec.Call(x, scale)
						require.NoError(b, err)
						_ = out[0].Value()
						out[0].MustFinalizeAll()
					}
					run() // Compile and move the input to the device outside the timing.
					b.SetBytes(int64(rows * cols))
					for b.Loop() {
						run()
					}
				})
			}
		}
	}
}

// BenchmarkDecodeE4M3NodeMatmul times a decode-step-like weight stream: a [4, n]
// bfloat16 activation through `layers` [n, n] weights, each followed by a tanh. Variants:
// bfloat16 weights (the baseline); FP8 weights decoded in-graph by each decoder with the
// per-output-channel scale folded into the decode ("scale-in-decode"), or decoded
// without scale and the scale applied to the [4, n] matmul output ("scale-after").
// Sizes are small on the Go backend.
func BenchmarkDecodeE4M3NodeMatmul(b *testing.B) {
	backend := testBackend(b)
	n, layers := 512, 2
	if backend.String() != "go" {
		n, layers = 8192, 8
	}
	weights8 := make([]uint8, layers*n*n)
	for i := range weights8 {
		weights8[i] = uint8(i*131) &^ 0x40
	}
	w8 := tensors.FromFlatDataAndDimensions(weights8, layers, n, n)
	table := E4M3DecodeTable()
	weights16 := make([]bfloat16.BFloat16, len(weights8))
	for i, v := range weights8 {
		weights16[i] = bfloat16.FromFloat32(table[v] / 64)
	}
	w16 := tensors.FromFlatDataAndDimensions(weights16, layers, n, n)
	scales := make([]float32, layers*n)
	for i := range scales {
		scales[i] = 1.0 / 64
	}
	scale := tensors.FromFlatDataAndDimensions(scales, layers, 1, n)
	act := make([]bfloat16.BFloat16, 4*n)
	for i := range act {
		act[i] = bfloat16.FromFloat32(float32(i%7) / 16)
	}
	x := tensors.FromFlatDataAndDimensions(act, 4, n)

	// layerFn returns layer l's output for activation x, weights w [layers, n, n] and
	// scales s [layers, 1, n].
	type layerFn func(x, w, s *graph.Node, l int) *graph.Node
	forward := func(layer layerFn) func(x, w, s *graph.Node) *graph.Node {
		return func(x, w, s *graph.Node) *graph.Node {
			for l := range layers {
				x = graph.Tanh(layer(x, w, s, l)) // Keep values bounded.
			}
			return x
		}
	}
	weightAndScale := func(w, s *graph.Node, l int) (*graph.Node, *graph.Node) {
		return graph.Reshape(graph.Slice(w, graph.AxisElem(l)), n, n), graph.Reshape(graph.Slice(s, graph.AxisElem(l)), 1, n)
	}
	type variant struct {
		name    string
		weights *tensors.Tensor
		layer   layerFn
	}
	variants := []variant{{"bf16-weights", w16, func(x, w, s *graph.Node, l int) *graph.Node {
		wl, _ := weightAndScale(w, s, l)
		return graph.MatMul(x, wl)
	}}}
	for _, dec := range decoders {
		variants = append(variants,
			variant{"fp8-" + dec.name + "/scale-in-decode", w8, func(x, w, s *graph.Node, l int) *graph.Node {
				wl, sl := weightAndScale(w, s, l)
				return graph.MatMul(x, dec.decode(wl, dtypes.BFloat16, sl))
			}},
			variant{"fp8-" + dec.name + "/scale-after", w8, func(x, w, s *graph.Node, l int) *graph.Node {
				wl, sl := weightAndScale(w, s, l)
				y := graph.MatMul(x, dec.decode(wl, dtypes.BFloat16, nil))
				return graph.ConvertDType(graph.Mul(graph.ConvertDType(y, dtypes.Float32), graph.BroadcastToDims(sl, 4, n)), dtypes.BFloat16)
			}})
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			exec, err := graph.NewExec(backend, forward(v.layer))
			require.NoError(b, err)
			defer exec.Finalize()
			run := func() {
				out, err := exec.Call(x, v.weights, scale)
				require.NoError(b, err)
				_ = out[0].Value()
				out[0].MustFinalizeAll()
			}
			run()
			b.SetBytes(int64(layers * n * n)) // Weights (as FP8 bytes) streamed per call.
			for b.Loop() {
				run()
			}
		})
	}
}
