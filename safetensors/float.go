package safetensors

import "math"

// Bit-level conversions between float32 and the 16- and 8-bit float formats. Decoding is
// exact: every value of these formats is a float32. Encoding rounds to nearest, ties to
// even, as torch and numpy do.

// float16ToFloat32 decodes an IEEE 754 half-precision value.
func float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: mant × 2⁻²⁴, exact in float32
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-24))
	case 0x1f: // infinity or NaN, keeping the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// bfloat16ToFloat32 decodes a bfloat16, which is the upper half of a float32.
func bfloat16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// float8E4M3ToFloat32 decodes an F8_E4M3 byte in its "FN" variant (torch.float8_e4m3fn):
// exponent bias 7, no infinities, and only the all-ones pattern (0x7f, 0xff) is NaN, which
// frees the top exponent for finite values up to 448.
func float8E4M3ToFloat32(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	exp := uint32(b>>3) & 0xf
	mant := uint32(b & 0x7)
	switch {
	case exp == 0xf && mant == 0x7:
		return math.Float32frombits(sign | 0x7fc00000)
	case exp == 0: // zero or subnormal: mant × 2⁻⁹
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-9))
	}
	return math.Float32frombits(sign | (exp+127-7)<<23 | mant<<20)
}

// float8E5M2ToFloat32 decodes an F8_E5M2 byte. E5M2 is half precision with the low
// mantissa byte dropped, infinities and NaNs included.
func float8E5M2ToFloat32(b uint8) float32 {
	return float16ToFloat32(uint16(b) << 8)
}

// float32ToBFloat16 rounds f to the nearest bfloat16. NaNs stay NaN (made quiet, so that
// dropping the low payload bits cannot turn them into infinities).
func float32ToBFloat16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x0040
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// float32ToFloat16 rounds f to the nearest half-precision value, overflowing to infinity.
func float32ToFloat16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	abs := bits & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN: quiet, keeping the top of the payload
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x477ff000: // ≥ 65520, halfway past the largest half (65504): infinity
		return sign | 0x7c00
	case abs < 0x38800000: // below 2⁻¹⁴: a half subnormal, that is, a multiple of 2⁻²⁴
		exp := abs >> 23
		shift := 126 - exp // turns the 24-bit significand into units of 2⁻²⁴
		if exp == 0 || shift > 24 {
			return sign // below 2⁻²⁵, which rounds to zero
		}
		mant := abs&0x7fffff | 0x800000
		return sign | uint16(roundShift(mant, shift))
	}
	// Normal: rebias the exponent and round away 13 mantissa bits; a carry out of the
	// mantissa correctly bumps the exponent.
	return sign | uint16(roundShift(abs-(127-15)<<23, 13))
}

// roundShift returns v >> shift rounded to nearest, ties to even.
func roundShift(v, shift uint32) uint32 {
	q := v >> shift
	rem := v & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}
