package safetensors

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

// TestDecodeTensorAs converts one tensor of every dtype to every float dtype.
func TestDecodeTensorAs(t *testing.T) {
	values := []float32{0, 1, -2, 3.5, 96, -0.25}
	integral := []float32{0, 1, -2, 3, 100, -7}
	for d := Bool; d <= I64; d++ {
		want := make([]float64, len(values))
		data := make([]byte, len(values)*d.Size())
		for i := range values {
			v := encodeForTest(t, d, data, i, values[i], integral[i])
			want[i] = v
		}
		info := TensorInfo{Name: "t", DType: d, Shape: []int{2, 3}, Begin: 0, End: int64(len(data))}
		for _, target := range []dtypes.DType{dtypes.Float64, dtypes.Float32, dtypes.Float16, dtypes.BFloat16} {
			got, err := DecodeTensorAs(info, data, target)
			require.NoError(t, err, "%s → %s", d, target)
			require.Equal(t, target, got.DType())
			require.Equal(t, []int{2, 3}, got.Shape().Dimensions)
			requireSameFloats(t, want, flatFloat64s(t, got), d, target) // the values chosen fit every dtype exactly
		}
		f32, err := DecodeFloat32s(d, data)
		require.NoError(t, err)
		requireSameFloats(t, want, convertAll(f32, func(v float32) float64 { return float64(v) }), d)
	}
}

// encodeForTest stores element i of a tensor of dtype d in data: value for float dtypes,
// integral for integer ones, its sign bit for BOOL. It returns the value stored.
func encodeForTest(t *testing.T, d DType, data []byte, i int, value, integral float32) float64 {
	t.Helper()
	var w Writer
	switch d {
	case F32, F64, F16, BF16:
		require.NoError(t, w.AddFloat32s("x", d, []int{1}, []float32{value}))
		copy(data[i*d.Size():], w.tensors[0].data)
		return float64(value)
	case F8E4M3, F8E5M2:
		for b := range 256 { // the byte that decodes to value
			decode := float8E4M3ToFloat32
			if d == F8E5M2 {
				decode = float8E5M2ToFloat32
			}
			if decode(uint8(b)) == value {
				data[i] = uint8(b)
				return float64(value)
			}
		}
		t.Fatalf("%g is not a %s value", value, d)
	case Bool:
		data[i] = boolByte(integral < 0)
		return float64(data[i])
	case U8:
		data[i] = uint8(math.Abs(float64(integral)))
		return float64(data[i])
	}
	v := int64(integral)
	for j := range d.Size() { // little-endian two's complement
		data[i*d.Size()+j] = byte(v >> (8 * j))
	}
	return float64(v)
}

func TestDecodeErrors(t *testing.T) {
	info := TensorInfo{Name: "w", DType: F32, Shape: []int{2}, Path: "m.safetensors"}
	_, err := DecodeTensor(info, make([]byte, 7))
	require.ErrorContains(t, err, `safetensors: m.safetensors: tensor "w": 7 bytes of data, but shape [2] of F32 needs 8`)
	_, err = DecodeTensorAs(info, make([]byte, 8), dtypes.Int32)
	require.ErrorContains(t, err, `tensor "w": cannot convert F32 to GoMLX Int32`)
	_, err = DecodeFloat32s(F32, make([]byte, 7))
	require.ErrorContains(t, err, "7 bytes is not a whole number of F32 elements")
	_, err = DecodeFloat32s(DType(0), nil)
	require.ErrorContains(t, err, "invalid dtype")
}

// TestDecodeTensorFloat8 checks that float8 tensors come as their raw bytes, and convert
// to floats on request.
func TestDecodeTensorFloat8(t *testing.T) {
	data := []byte{0x38, 0x7e, 0xb8} // 1, 448, -1 in E4M3
	info := TensorInfo{Name: "q", DType: F8E4M3, Shape: []int{3}, End: 3}
	raw, err := DecodeTensor(info, data)
	require.NoError(t, err)
	require.Equal(t, dtypes.Uint8, raw.DType())
	require.Equal(t, []float64{0x38, 0x7e, 0xb8}, flatFloat64s(t, raw))
	same, err := DecodeTensorAs(info, data, dtypes.Uint8)
	require.NoError(t, err)
	require.Equal(t, flatFloat64s(t, raw), flatFloat64s(t, same))
	values, err := DecodeTensorAs(info, data, dtypes.Float32)
	require.NoError(t, err)
	require.Equal(t, []float64{1, 448, -1}, flatFloat64s(t, values))
}

func TestDecodeTensorBoolNormalizes(t *testing.T) {
	got, err := DecodeTensor(TensorInfo{Name: "b", DType: Bool, Shape: []int{3}, End: 3}, []byte{0, 1, 7})
	require.NoError(t, err)
	require.Equal(t, []float64{0, 1, 1}, flatFloat64s(t, got))
}
