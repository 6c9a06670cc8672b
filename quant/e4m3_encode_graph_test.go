package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// encodeInGraph runs EncodeE4M3Node over a tensor and returns the bytes.
func encodeInGraph(t *testing.T, x *tensors.Tensor, saturate bool) []uint8 {
	t.Helper()
	out, err := graph.CallOnce(testBackend(t), func(x *graph.Node) *graph.Node {
		return EncodeE4M3Node(x, saturate)
	}, x)
	require.NoError(t, err)
	require.Equal(t, dtypes.Uint8, out.DType())
	require.Equal(t, x.Shape().Dimensions, out.Shape().Dimensions)
	return tensors.MustCopyFlatData[uint8](out)
}

// Every fixture row, in both modes, gives torch's byte.
func TestEncodeE4M3NodeFixture(t *testing.T) {
	f := loadE4M3Fixture(t)
	src := make([]float32, len(f.Rows))
	for i, row := range f.Rows {
		src[i] = math.Float32frombits(row.InputBits)
	}
	x := tensors.FromFlatDataAndDimensions(src, len(src))
	for _, saturate := range []bool{false, true} {
		got := encodeInGraph(t, x, saturate)
		for i, row := range f.Rows {
			want := row.CastByte
			if saturate {
				want = row.SaturatingByte
			}
			assert.Equal(t, want, got[i], "saturate=%v row %d: %g (bits %#08x)", saturate, i, src[i], row.InputBits)
		}
	}
}

// Random float32 bit patterns (every exponent, NaNs, infinities, float32 subnormals)
// and values clustered around E4M3's range agree with the Go encoder.
func TestEncodeE4M3NodeMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 1<<16)
	for i := range src {
		if i%2 == 0 {
			src[i] = math.Float32frombits(rng.Uint32())
		} else {
			src[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(24)-14)))
		}
	}
	src[0], src[1], src[2] = float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1))
	x := tensors.FromFlatDataAndDimensions(src, 256, len(src)/256)
	for _, saturate := range []bool{false, true} {
		got := encodeInGraph(t, x, saturate)
		for i, v := range src {
			if want := EncodeE4M3(v, saturate); want != got[i] {
				t.Fatalf("saturate=%v: %g (bits %#08x): want %#02x, got %#02x", saturate, v, math.Float32bits(v), want, got[i])
			}
		}
	}
}

// BFloat16 inputs are widened exactly, then encoded.
func TestEncodeE4M3NodeBFloat16(t *testing.T) {
	src := make([]bfloat16.BFloat16, 1<<16)
	for i := range src {
		src[i] = bfloat16.FromBits(uint16(i))
	}
	got := encodeInGraph(t, tensors.FromFlatDataAndDimensions(src, len(src)), true)
	for i, v := range src {
		require.Equal(t, EncodeE4M3(v.Float32(), true), got[i], "bfloat16 bits %#04x", i)
	}
}

// Quantize-dequantize gives the decoded bytes of the Go encoder of x/scale.
func TestQuantizeDequantizeE4M3Node(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 4096)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 3)
	}
	const scale = float32(0.0173)
	out, err := graph.CallOnce(testBackend(t), func(x, s *graph.Node) *graph.Node {
		return quantizeDequantizeE4M3Node(x, s, dtypes.Float32)
	}, tensors.FromFlatDataAndDimensions(src, 64, 64), tensors.FromValue(scale))
	require.NoError(t, err)
	got := tensors.MustCopyFlatData[float32](out)
	for i, v := range src {
		require.Equal(t, DecodeE4M3(EncodeE4M3(v/scale, true)), got[i], "element %d: %g", i, v)
	}
}

func TestEncodeE4M3NodeErrors(t *testing.T) {
	g := graph.NewGraph(testBackend(t), "errors")
	for _, dtype := range []dtypes.DType{dtypes.Int32, dtypes.Uint8, dtypes.Bool} {
		x := graph.Parameter(g, "x_"+dtype.String(), shapes.Make(dtype, 4))
		assert.Panics(t, func() { EncodeE4M3Node(x, true) }, "%s input", dtype)
	}
}
