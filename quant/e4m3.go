package quant

import (
	"fmt"
	"math"
)

// E4M3 format constants.
const (
	// E4M3Max is the largest finite E4M3FN magnitude (byte 0x7e): 1.75 × 2^8.
	E4M3Max = 448
	// E4M3NaN is the byte of a positive NaN; 0xff (E4M3NaN | 0x80) is the negative one.
	// These are the only NaN encodings, and E4M3FN has no infinities.
	E4M3NaN uint8 = 0x7f
)

// Float32 bit patterns used by the encoder (magnitudes, sign bit cleared).
const (
	f32AbsInf       = 0x7f800000 // +Inf: any larger magnitude pattern is a NaN.
	f32Abs480       = 0x43f00000 // 480 = 1.875 × 2^8, the first magnitude past 448 in E4M3's grid.
	f32AbsMinNormal = 0x3c800000 // 2^-6, E4M3's smallest normal magnitude.
	f32QuietNaN     = 0x7fc00000 // The canonical quiet NaN that DecodeE4M3 returns (sign aside).
	e4m3RebiasF32   = (127 - 7) << 23
)

// EncodeE4M3 rounds v to the nearest FP8 E4M3FN value, ties to even, and returns its byte.
//
// With saturate false it matches PyTorch's plain cast `x.to(torch.float8_e4m3fn)`:
// magnitudes that round to more than 448 (that is, above 464, the midpoint between 448
// and the next step 480, which E4M3FN lacks) and infinities become NaN (0x7f, or 0xff
// when negative). With saturate true, v is first clamped to [-448, 448], so every finite
// or infinite input gives a finite byte (this is `x.clamp(-448, 448).to(torch.float8_e4m3fn)`).
// A NaN input gives a NaN byte with the input's sign in both modes. Zeros keep their sign,
// and magnitudes up to 2^-10 (half the smallest subnormal 2^-9; the tie goes to the even
// zero) become signed zero.
func EncodeE4M3(v float32, saturate bool) uint8 {
	bits := math.Float32bits(v)
	sign := uint8(bits>>24) & 0x80
	abs := bits &^ (1 << 31)
	switch {
	case abs > f32AbsInf: // NaN
		return sign | E4M3NaN
	case abs >= f32Abs480: // Rounds past 448 whatever the rounding; includes ±Inf.
		if saturate {
			return sign | 0x7e
		}
		return sign | E4M3NaN
	case abs >= f32AbsMinNormal: // E4M3 normal range.
		// Rebias the exponent from 127 to 7, then drop 20 of the 23 mantissa bits,
		// rounding to nearest even; a carry out of the mantissa bumps the exponent,
		// which is the correct result. Magnitudes in (464, 480) land on 0x7f, the NaN.
		abs -= e4m3RebiasF32
		r := uint8((abs + 0x7ffff + (abs>>20)&1) >> 20)
		if r == E4M3NaN && saturate {
			r = 0x7e
		}
		return sign | r
	default: // Below 2^-6: a multiple m of 2^-9, m in [0, 8] (8 is the smallest normal, 0x08).
		return sign | encodeSubnormal(abs)
	}
}

// encodeSubnormal returns round(abs × 2^9) to nearest even for a float32 magnitude
// pattern abs below 2^-6; the result is in [0, 8] and is the E4M3 byte (sign aside).
//
// Adding 2^14, whose float32 ulp is 2^-9, makes the float32 adder round the value to a
// multiple of 2^-9 (to nearest even, IEEE's default); the multiple is then read off the
// low mantissa bits.
func encodeSubnormal(abs uint32) uint8 {
	const magic = 1 << 14
	return uint8(math.Float32bits(math.Float32frombits(abs)+magic) - math.Float32bits(magic))
}

// e4m3Table holds the float32 value of every E4M3FN byte.
var e4m3Table = func() (table [256]float32) {
	for b := range table {
		table[b] = math.Float32frombits(decodeE4M3Bits(uint8(b)))
	}
	return table
}()

// decodeE4M3Bits returns the float32 bit pattern of the value of byte b: exact for
// every finite value, and a quiet NaN with b's sign for 0x7f and 0xff.
func decodeE4M3Bits(b uint8) uint32 {
	sign := uint32(b>>7) << 31
	mag := uint32(b & 0x7f)
	exp, mant := mag>>3, mag&7
	switch {
	case mag == uint32(E4M3NaN):
		return sign | f32QuietNaN
	case exp == 0: // Subnormal: mant × 2^-9, exact in float32.
		return sign | math.Float32bits(float32(mant)/512)
	default: // 2^(exp-7) × (1 + mant/8): rebias the exponent to 127 and widen the mantissa.
		return sign | (mag<<20 + e4m3RebiasF32)
	}
}

// DecodeE4M3 returns the exact float32 value of the FP8 E4M3FN byte b.
//
// Bytes 0x7f and 0xff decode to a quiet NaN (bits 0x7fc00000, with the byte's sign), and
// 0x80 to -0.
func DecodeE4M3(b uint8) float32 {
	return e4m3Table[b]
}

// E4M3DecodeTable returns the value of every FP8 E4M3FN byte: entry b is DecodeE4M3(b).
// The array is a copy, free to modify.
func E4M3DecodeTable() [256]float32 {
	return e4m3Table
}

// EncodeE4M3Slice quantizes src into dst: dst[i] = EncodeE4M3(src[i]/scale, saturate).
//
// Dividing (rather than multiplying by 1/scale) matches the usual reference
// `(x / scale).to(torch.float8_e4m3fn)` bit for bit. It panics if the slices differ in
// length or if scale is not a positive finite number.
func EncodeE4M3Slice(dst []uint8, src []float32, scale float32, saturate bool) {
	checkSlices("EncodeE4M3Slice", len(dst), len(src), scale)
	dst = dst[:len(src)]
	if scale == 1 {
		for i, v := range src {
			dst[i] = EncodeE4M3(v, saturate)
		}
		return
	}
	for i, v := range src {
		dst[i] = EncodeE4M3(v/scale, saturate)
	}
}

// DecodeE4M3Slice dequantizes src into dst: dst[i] = DecodeE4M3(src[i]) × scale, with
// one float32 rounding of the product (none when scale is 1 or a power of two in range).
//
// It panics if the slices differ in length or if scale is not a positive finite number.
func DecodeE4M3Slice(dst []float32, src []uint8, scale float32) {
	checkSlices("DecodeE4M3Slice", len(dst), len(src), scale)
	dst = dst[:len(src)]
	if scale == 1 {
		for i, b := range src {
			dst[i] = e4m3Table[b]
		}
		return
	}
	for i, b := range src {
		dst[i] = e4m3Table[b] * scale
	}
}

// checkSlices panics, naming the function, on mismatched lengths or an unusable scale.
func checkSlices(name string, lenDst, lenSrc int, scale float32) {
	if lenDst != lenSrc {
		panic(fmt.Sprintf("quant.%s: len(dst)=%d differs from len(src)=%d", name, lenDst, lenSrc))
	}
	if !(scale > 0) || math.IsInf(float64(scale), 1) {
		panic(fmt.Sprintf("quant.%s: scale must be a positive finite number, got %g", name, scale))
	}
}
