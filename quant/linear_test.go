package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomLinear makes an FP8 layer [out, in] from normal weights, and the input [2, 3, in].
func randomLinear(t testing.TB, out, in int, strategy Strategy, inputScale float32) (*FP8Linear, []float32) {
	rng := rand.New(rand.NewPCG(uint64(out), uint64(in)))
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.05)
	}
	q, scales, err := quantizeWeight(w, out, in, strategy)
	require.NoError(t, err)
	l, err := NewFP8Linear(testBackend(t), q, out, in, scales, inputScale)
	require.NoError(t, err)
	x := make([]float32, 2*3*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 2)
	}
	return l, x
}

// referenceApply computes the layer in float64 from its host values, quantizing the input
// with the Go encoder: what Apply must give up to float32 rounding.
func referenceApply(t *testing.T, l *FP8Linear, x []float32) []float64 {
	weight, scales, inputScale, err := l.Host()
	require.NoError(t, err)
	out, in := l.OutFeatures(), l.InFeatures()
	rows := len(x) / in
	y := make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			s := float64(scales[0])
			if len(scales) > 1 {
				s = float64(scales[o])
			}
			var sum float64
			for i := range in {
				xv := float64(x[r*in+i])
				if inputScale != 0 {
					xv = float64(DecodeE4M3(EncodeE4M3(x[r*in+i]/inputScale, true))) * float64(inputScale)
				}
				sum += xv * float64(DecodeE4M3(weight[o*in+i])) * s
			}
			y[r*out+o] = sum
		}
	}
	return y
}

// Apply matches a float64 reference for each strategy, with and without an input scale
// (one small enough that some activations saturate), in float32 and bfloat16.
func TestFP8LinearApply(t *testing.T) {
	const out, in = 24, 40
	for _, strategy := range []Strategy{StrategyChannel, StrategyTensor} {
		for _, inputScale := range []float32{0, 0.01, 0.004} {
			for i, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				decoder := []Decoder{DecoderLUT, DecoderBits}[(i+int(inputScale*1000))%2]
				t.Run(fmt.Sprintf("%s/input=%g/%s/decoder=%d", strategy, inputScale, dtype, decoder), func(t *testing.T) {
					l, x := randomLinear(t, out, in, strategy, inputScale)
					l.Decoder = decoder
					assert.Equal(t, strategy, l.Strategy())
					assert.Equal(t, out, l.OutFeatures())
					assert.Equal(t, in, l.InFeatures())
					if dtype == dtypes.BFloat16 {
						for i, v := range x { // The reference sees the bf16 input.
							x[i] = bfloat16.FromFloat32(v).Float32()
						}
					}
					want := referenceApply(t, l, x)
					xt := tensors.FromFlatDataAndDimensions(x, 2, 3, in)
					args := []any{xt}
					for _, p := range l.Params() {
						args = append(args, p)
					}
					result, err := graph.CallOnce(testBackend(t), func(in []*graph.Node) *graph.Node {
						return graph.ConvertDType(l.Apply(graph.ConvertDType(in[0], dtype), in[1:]), dtypes.Float32)
					}, args...)
					require.NoError(t, err)
					require.Equal(t, []int{2, 3, out}, result.Shape().Dimensions)
					got := tensors.MustCopyFlatData[float32](result)
					tolerance := 1e-5
					if dtype == dtypes.BFloat16 {
						tolerance = 1.0 / 128 // One bfloat16 rounding of the output.
					}
					var peak float64
					for _, v := range want {
						peak = math.Max(peak, math.Abs(v))
					}
					for i := range want {
						require.InDelta(t, want[i], float64(got[i]), tolerance*peak, "element %d", i)
					}
				})
			}
		}
	}
}

// Params, Bytes and Host describe what NewFP8Linear uploaded.
func TestFP8LinearParams(t *testing.T) {
	weight := []uint8{0x38, 0xb8, 0x40, 0x00, 0x7e, 0x01}
	l, err := NewFP8Linear(testBackend(t), weight, 2, 3, []float32{0.5, 0.25}, 0.125)
	require.NoError(t, err)
	require.Len(t, l.Params(), 3)
	assert.Equal(t, int64(6+8+4), l.Bytes())
	w, scales, input, err := l.Host()
	require.NoError(t, err)
	assert.Equal(t, weight, w)
	assert.Equal(t, []float32{0.5, 0.25}, scales)
	assert.Equal(t, float32(0.125), input)

	l, err = NewFP8Linear(testBackend(t), weight, 2, 3, []float32{0.5}, 0)
	require.NoError(t, err)
	require.Len(t, l.Params(), 2)
	assert.True(t, l.WeightScale.Shape().IsScalar())
	_, _, input, err = l.Host()
	require.NoError(t, err)
	assert.Zero(t, input)
	require.NoError(t, l.free())
}

// Per-channel quantization gives each row the scale of its largest magnitude, and
// saturating encoding keeps every value finite; an all-zero row gets MinScale.
func TestQuantizeWeight(t *testing.T) {
	w := []float32{1, -2, 0.5, 0, 0, 0, 448, 3, -1e-3}
	q, scales, err := quantizeWeight(w, 3, 3, StrategyChannel)
	require.NoError(t, err)
	assert.Equal(t, []float32{2.0 / 448, MinScale, 1}, scales)
	assert.Equal(t, EncodeE4M3(-448, true), q[1])
	assert.Equal(t, uint8(0x7e), q[6])
	q, scales, err = quantizeWeight(w, 3, 3, StrategyTensor)
	require.NoError(t, err)
	assert.Equal(t, []float32{1}, scales)
	assert.Equal(t, EncodeE4M3(3, true), q[7])
	_, _, err = quantizeWeight([]float32{1, float32(math.Inf(1))}, 1, 2, StrategyChannel)
	require.ErrorContains(t, err, "non-finite value")
	_, _, err = quantizeWeight([]float32{1}, 1, 2, StrategyChannel)
	require.Error(t, err)
	assert.Equal(t, float32(1), ScaleFromAmax(448))
	assert.Equal(t, float32(MinScale), ScaleFromAmax(0))
}
