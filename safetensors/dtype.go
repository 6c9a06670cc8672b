package safetensors

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
)

// DType is the element type of a tensor, as named in a safetensors header.
type DType uint8

// The dtypes this package reads and writes. They are declared in the order the reference
// (Rust) implementation ranks them; [Writer] lays out tensors by descending rank, as that
// implementation does, so the constants' order matters.
const (
	Bool   DType = iota + 1 // BOOL: one byte, 0 or 1
	U8                      // U8: unsigned 8-bit integer
	I8                      // I8: signed 8-bit integer
	F8E5M2                  // F8_E5M2: 8-bit float, 5 exponent bits, IEEE-like with infinities and NaNs
	F8E4M3                  // F8_E4M3: 8-bit float, 4 exponent bits, the "FN" variant without infinities
	I16                     // I16: signed 16-bit integer
	F16                     // F16: IEEE 754 half precision
	BF16                    // BF16: bfloat16, the upper half of a float32
	I32                     // I32: signed 32-bit integer
	F32                     // F32: IEEE 754 single precision
	F64                     // F64: IEEE 754 double precision
	I64                     // I64: signed 64-bit integer
)

var dtypeNames = [...]string{
	Bool:   "BOOL",
	U8:     "U8",
	I8:     "I8",
	F8E5M2: "F8_E5M2",
	F8E4M3: "F8_E4M3",
	I16:    "I16",
	F16:    "F16",
	BF16:   "BF16",
	I32:    "I32",
	F32:    "F32",
	F64:    "F64",
	I64:    "I64",
}

var dtypeSizes = [...]int{
	Bool: 1, U8: 1, I8: 1, F8E5M2: 1, F8E4M3: 1,
	I16: 2, F16: 2, BF16: 2,
	I32: 4, F32: 4,
	F64: 8, I64: 8,
}

// storageDTypes maps each dtype to the GoMLX dtype holding its values. GoMLX backends have
// no float8 types, so the float8 dtypes are held as their raw bytes.
var storageDTypes = [...]dtypes.DType{
	Bool:   dtypes.Bool,
	U8:     dtypes.Uint8,
	I8:     dtypes.Int8,
	F8E5M2: dtypes.Uint8,
	F8E4M3: dtypes.Uint8,
	I16:    dtypes.Int16,
	F16:    dtypes.Float16,
	BF16:   dtypes.BFloat16,
	I32:    dtypes.Int32,
	F32:    dtypes.Float32,
	F64:    dtypes.Float64,
	I64:    dtypes.Int64,
}

// ParseDType returns the dtype named s in a safetensors header, such as "BF16" or
// "F8_E4M3". Names are case-sensitive, as in the format.
func ParseDType(s string) (DType, error) {
	for d := Bool; d <= I64; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unsupported dtype %q", s)
}

// DTypeFromGoMLX returns the safetensors dtype that stores GoMLX dtype d without loss.
// Uint8 maps to U8: nothing in a GoMLX tensor says its bytes are float8 values.
func DTypeFromGoMLX(d dtypes.DType) (DType, error) {
	for s := Bool; s <= I64; s++ { // U8 comes before the float8 dtypes that share its storage
		if storageDTypes[s] == d {
			return s, nil
		}
	}
	return 0, fmt.Errorf("GoMLX dtype %s has no safetensors equivalent", d)
}

// String returns the dtype's name in a safetensors header.
func (d DType) String() string {
	if !d.valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Size returns the number of bytes of one element, or 0 for an invalid dtype.
func (d DType) Size() int {
	if !d.valid() {
		return 0
	}
	return dtypeSizes[d]
}

// GoMLXDType returns the GoMLX dtype that holds values of d: the same type, or
// dtypes.Uint8 (the raw bytes) for F8E4M3 and F8E5M2. It returns dtypes.InvalidDType for
// an invalid dtype.
func (d DType) GoMLXDType() dtypes.DType {
	if !d.valid() {
		return dtypes.InvalidDType
	}
	return storageDTypes[d]
}

func (d DType) valid() bool { return d >= Bool && d <= I64 }
