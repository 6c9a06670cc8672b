package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"
)

// DecodeFloat32s converts data, the little-endian elements of a tensor of the given dtype,
// to float32. The 16- and 8-bit floats decode exactly; F64 and the 32- and 64-bit integers
// are rounded to the nearest float32; BOOL gives 0 or 1.
func DecodeFloat32s(dtype DType, data []byte) ([]float32, error) {
	if !dtype.valid() {
		return nil, fmt.Errorf("invalid dtype %s", dtype)
	}
	if len(data)%dtype.Size() != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %s elements", len(data), dtype)
	}
	values := make([]float32, len(data)/dtype.Size())
	decodeFloats(values, dtype, data)
	return values, nil
}

// DecodeTensor copies data, the bytes of the tensor info describes, into a new GoMLX
// tensor of the dtype given by [DType.GoMLXDType]: the same dtype, or Uint8 holding the
// raw bytes of F8E4M3 and F8E5M2.
func DecodeTensor(info TensorInfo, data []byte) (*tensors.Tensor, error) {
	if err := checkData(info, data); err != nil {
		return nil, err
	}
	t := tensors.FromShape(shapes.Make(info.DType.GoMLXDType(), info.Shape...))
	err := t.MutableBytes(func(dst []byte) {
		if info.DType == Bool {
			for i, b := range data {
				dst[i] = boolByte(b != 0) // a Go bool must be exactly 0 or 1
			}
			return
		}
		copyLittleEndian(dst, data, info.DType.Size())
	})
	if err != nil {
		return nil, tensorError(info, err)
	}
	return t, nil
}

// DecodeTensorAs copies data, the bytes of the tensor info describes, into a new GoMLX
// tensor of the given dtype. The dtype may be the tensor's own (see [DecodeTensor]), or
// any float dtype: Float64 and Float32 receive the values as [DecodeFloat32s] converts
// them (exactly, for Float64), and Float16 and BFloat16 receive them rounded to nearest
// even from float32. For example, a BF16 tensor becomes Float32 without loss.
func DecodeTensorAs(info TensorInfo, data []byte, dtype dtypes.DType) (*tensors.Tensor, error) {
	if dtype == info.DType.GoMLXDType() {
		return DecodeTensor(info, data)
	}
	if err := checkData(info, data); err != nil {
		return nil, err
	}
	t := tensors.FromShape(shapes.Make(dtype, info.Shape...))
	var err error
	switch dtype {
	case dtypes.Float64:
		err = tensors.MutableFlatData(t, func(dst []float64) { decodeFloats(dst, info.DType, data) })
	case dtypes.Float32:
		err = tensors.MutableFlatData(t, func(dst []float32) { decodeFloats(dst, info.DType, data) })
	case dtypes.Float16:
		err = tensors.MutableFlatData(t, func(dst []float16.Float16) {
			decodeEncoded(dst, info.DType, data, func(f float32) float16.Float16 { return float16.Float16(float32ToFloat16(f)) })
		})
	case dtypes.BFloat16:
		err = tensors.MutableFlatData(t, func(dst []bfloat16.BFloat16) {
			decodeEncoded(dst, info.DType, data, func(f float32) bfloat16.BFloat16 { return bfloat16.BFloat16(float32ToBFloat16(f)) })
		})
	default:
		return nil, tensorError(info, fmt.Errorf("cannot convert %s to GoMLX %s", info.DType, dtype))
	}
	if err != nil {
		return nil, tensorError(info, err)
	}
	return t, nil
}

// checkData checks that data has the size info calls for.
func checkData(info TensorInfo, data []byte) error {
	size, err := byteSize(info.DType, info.Shape)
	if err == nil && int64(len(data)) != size {
		err = fmt.Errorf("%d bytes of data, but shape %v of %s needs %d", len(data), info.Shape, info.DType, size)
	}
	if err != nil {
		return tensorError(info, err)
	}
	return nil
}

// tensorError wraps err with the tensor's file and name.
func tensorError(info TensorInfo, err error) error {
	if info.Path == "" {
		return fmt.Errorf("safetensors: tensor %q: %w", info.Name, err)
	}
	return fmt.Errorf("safetensors: %s: tensor %q: %w", info.Path, info.Name, err)
}

// decodeFloats converts the little-endian elements of src, of the given dtype, into dst,
// which holds one value per element.
func decodeFloats[F float32 | float64](dst []F, dtype DType, src []byte) {
	le := binary.LittleEndian
	switch dtype {
	case F64:
		for i := range dst {
			dst[i] = F(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	case F32:
		for i := range dst {
			dst[i] = F(math.Float32frombits(le.Uint32(src[4*i:])))
		}
	case F16:
		for i := range dst {
			dst[i] = F(float16ToFloat32(le.Uint16(src[2*i:])))
		}
	case BF16:
		for i := range dst {
			dst[i] = F(bfloat16ToFloat32(le.Uint16(src[2*i:])))
		}
	case F8E4M3:
		for i := range dst {
			dst[i] = F(float8E4M3ToFloat32(src[i]))
		}
	case F8E5M2:
		for i := range dst {
			dst[i] = F(float8E5M2ToFloat32(src[i]))
		}
	case I64:
		for i := range dst {
			dst[i] = F(int64(le.Uint64(src[8*i:])))
		}
	case I32:
		for i := range dst {
			dst[i] = F(int32(le.Uint32(src[4*i:])))
		}
	case I16:
		for i := range dst {
			dst[i] = F(int16(le.Uint16(src[2*i:])))
		}
	case I8:
		for i := range dst {
			dst[i] = F(int8(src[i]))
		}
	case U8:
		for i := range dst {
			dst[i] = F(src[i])
		}
	case Bool:
		for i := range dst {
			dst[i] = F(boolByte(src[i] != 0))
		}
	}
}

// decodeEncoded converts the elements of src to float32 and then, through encode, to a
// half-precision type, a block at a time to bound the temporary memory.
func decodeEncoded[H any](dst []H, dtype DType, src []byte, encode func(float32) H) {
	const block = 4096
	buf := make([]float32, min(block, len(dst)))
	size := dtype.Size()
	for start := 0; start < len(dst); start += block {
		n := min(block, len(dst)-start)
		decodeFloats(buf[:n], dtype, src[start*size:(start+n)*size])
		for i, f := range buf[:n] {
			dst[start+i] = encode(f)
		}
	}
}

// hostIsLittleEndian is whether this machine stores numbers as the format does, so that
// copying data to native memory needs no byte swapping.
var hostIsLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// copyLittleEndian copies elements of elemSize bytes from src to dst, converting between
// little-endian and this machine's byte order (a conversion that is its own inverse, so it
// serves reading and writing alike).
func copyLittleEndian(dst, src []byte, elemSize int) {
	if hostIsLittleEndian || elemSize == 1 {
		copy(dst, src)
		return
	}
	for i := 0; i < len(src); i += elemSize {
		for j := range elemSize {
			dst[i+j] = src[i+elemSize-1-j]
		}
	}
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
