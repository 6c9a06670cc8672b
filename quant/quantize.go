package quant

import (
	"fmt"
	"math"
)

// MinScale is the smallest scale [ScaleFromAmax] returns: float32's machine epsilon,
// 2^-23, so that an all-zero tensor still gets a usable positive scale.
const MinScale = 0x1p-23

// ScaleFromAmax returns the symmetric FP8 E4M3 scale for values of largest magnitude
// amax: amax/448 in float32, at least [MinScale]. Values divided by it fit E4M3's range.
func ScaleFromAmax(amax float32) float32 {
	return max(amax/E4M3Max, MinScale)
}

// amaxOf returns the largest magnitude of v, or an error on a NaN or infinity.
func amaxOf(v []float32) (float32, error) {
	var m float32
	for i, x := range v {
		a := float32(math.Abs(float64(x)))
		if !(a <= math.MaxFloat32) {
			return 0, fmt.Errorf("non-finite value %g at index %d", x, i)
		}
		m = max(m, a)
	}
	return m, nil
}

// quantizeWeight encodes a float32 weight [out, in] (row-major) to E4M3FN bytes with
// saturation, with one scale (StrategyTensor) or one per row (StrategyChannel), each
// ScaleFromAmax of the values it covers.
func quantizeWeight(w []float32, out, in int, strategy Strategy) ([]uint8, []float32, error) {
	if len(w) != out*in {
		return nil, nil, fmt.Errorf("weight [%d, %d] has %d values", out, in, len(w))
	}
	q := make([]uint8, len(w))
	if strategy.orDefault() == StrategyTensor {
		amax, err := amaxOf(w)
		if err != nil {
			return nil, nil, fmt.Errorf("weight: %w", err)
		}
		scale := ScaleFromAmax(amax)
		EncodeE4M3Slice(q, w, scale, true)
		return q, []float32{scale}, nil
	}
	scales := make([]float32, out)
	for o := range out {
		row := w[o*in : (o+1)*in]
		amax, err := amaxOf(row)
		if err != nil {
			return nil, nil, fmt.Errorf("weight row %d: %w", o, err)
		}
		scales[o] = ScaleFromAmax(amax)
		EncodeE4M3Slice(q[o*in:(o+1)*in], row, scales[o], true)
	}
	return q, scales, nil
}

// requantize rewrites E4M3FN bytes of scale from to scale to (to >= from): each value is
// decoded and scaled in float32, then encoded again with saturation. A byte whose value
// is exactly representable at the new scale keeps its value.
func requantize(q []uint8, from, to float32) {
	if from == to {
		return
	}
	for i, b := range q {
		q[i] = EncodeE4M3(DecodeE4M3(b)*from/to, true)
	}
}

// checkFiniteBytes rejects the NaN bytes (0x7f, 0xff) in an FP8 weight.
func checkFiniteBytes(q []uint8) error {
	for i, b := range q {
		if b&0x7f == E4M3NaN {
			return fmt.Errorf("NaN byte %#02x at index %d", b, i)
		}
	}
	return nil
}
