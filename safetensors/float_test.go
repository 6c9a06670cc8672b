package safetensors

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/stretchr/testify/require"
)

// TestFloat16AllValues decodes every half-precision bit pattern, compares with GoMLX's
// decoder, and encodes the value back to the same bits.
func TestFloat16AllValues(t *testing.T) {
	for bits := range 1 << 16 {
		h := uint16(bits)
		got := float16ToFloat32(h)
		want := float16.Float16(h).Float32()
		if math.IsNaN(float64(want)) {
			require.Truef(t, math.IsNaN(float64(got)), "%#04x", h)
			require.Truef(t, math.IsNaN(float64(float16ToFloat32(float32ToFloat16(got)))), "%#04x: NaN must stay NaN", h)
			continue
		}
		require.Equalf(t, math.Float32bits(want), math.Float32bits(got), "%#04x", h)
		require.Equalf(t, h, float32ToFloat16(got), "%#04x: round trip", h)
	}
}

// roundToHalf returns the half-precision value nearest f, ties to even, computed with
// float64 arithmetic on the grid of halves around f: an independent reference.
func roundToHalf(f float32) float64 {
	x := float64(f)
	if math.Abs(x) >= 65520 { // halfway past the largest half, 65504
		return math.Inf(int(math.Copysign(1, x)))
	}
	exp := max(math.Ilogb(x), -14) // halves below 2⁻¹⁴ are subnormal, on the grid of 2⁻²⁴
	step := math.Ldexp(1, exp-10)
	return math.Copysign(math.RoundToEven(x/step)*step, x) // x/step is exact
}

// TestFloat32ToFloat16Rounding checks the encoder against roundToHalf on float32 values
// spread over the whole range, and on every value halfway between two adjacent halves.
func TestFloat32ToFloat16Rounding(t *testing.T) {
	check := func(f float32) {
		want := roundToHalf(f)
		got := float16ToFloat32(float32ToFloat16(f))
		require.Equalf(t, want, float64(got), "%g (%#08x)", f, math.Float32bits(f))
		require.Equalf(t, math.Signbit(want), math.Signbit(float64(got)), "%g: sign", f)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		if f := math.Float32frombits(rng.Uint32()); !math.IsNaN(float64(f)) {
			check(f)
		}
	}
	for bits := range 0x7c00 - 1 { // every pair of adjacent finite halves
		lo, hi := float16ToFloat32(uint16(bits)), float16ToFloat32(uint16(bits+1))
		mid := float32((float64(lo) + float64(hi)) / 2) // exact: a half has 11 significant bits
		for _, f := range []float32{mid, -mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1)} {
			check(f)
		}
		require.Zerof(t, float32ToFloat16(mid)&1, "%g is a tie and must round to the even half", mid)
	}
	require.Equal(t, uint16(0x7bff), float32ToFloat16(65519.99))
	require.Equal(t, uint16(0x7c00), float32ToFloat16(65520), "halfway past the largest half rounds to infinity")
	require.Equal(t, uint16(0x0001), float32ToFloat16(0x1p-24))
	require.Equal(t, uint16(0x0000), float32ToFloat16(0x1p-25), "a tie with zero rounds to zero, the even one")
	require.Equal(t, uint16(0x0001), float32ToFloat16(0x1.000002p-25))
	require.Equal(t, uint16(0x0400), float32ToFloat16(math.Float32frombits(0x387ff59b)), "rounds up to the smallest normal")
	require.Equal(t, uint16(0x7e00), float32ToFloat16(float32(math.NaN()))&0x7e00, "NaN")
}

// TestBFloat16 checks bfloat16 decoding and rounding, and that NaNs whose payload lies in
// the dropped bits stay NaN.
func TestBFloat16(t *testing.T) {
	for bits := range 1 << 16 {
		b := uint16(bits)
		f := bfloat16ToFloat32(b)
		require.Equal(t, uint32(b)<<16, math.Float32bits(f))
		if !math.IsNaN(float64(f)) {
			require.Equal(t, b, float32ToBFloat16(f))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1_000_000 {
		f := math.Float32frombits(rng.Uint32())
		if !math.IsNaN(float64(f)) {
			require.Equalf(t, uint16(bfloat16.FromFloat32(f)), float32ToBFloat16(f), "%g", f)
		}
	}
	require.Equal(t, uint16(0x3f80), float32ToBFloat16(math.Float32frombits(0x3f808000)), "a tie rounds to even")
	require.Equal(t, uint16(0x3f82), float32ToBFloat16(math.Float32frombits(0x3f818000)), "a tie rounds to even")
	lowPayloadNaN := math.Float32frombits(0x7f800001)
	require.True(t, math.IsNaN(float64(bfloat16ToFloat32(float32ToBFloat16(lowPayloadNaN)))))
}

// TestFloat8E5M2 checks the E5M2 decoder on the values that define the format.
func TestFloat8E5M2(t *testing.T) {
	for b, want := range map[uint8]float64{
		0x00: 0, 0x3c: 1, 0xbc: -1, 0x01: 0x1p-16, 0x04: 0x1p-14, 0x7b: 57344,
		0x7c: math.Inf(1), 0xfc: math.Inf(-1), 0x3d: 1.25, 0x40: 2,
	} {
		require.Equalf(t, want, float64(float8E5M2ToFloat32(b)), "%#02x", b)
	}
	for _, b := range []uint8{0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff} {
		require.Truef(t, math.IsNaN(float64(float8E5M2ToFloat32(b))), "%#02x", b)
	}
	require.True(t, math.Signbit(float64(float8E5M2ToFloat32(0x80))), "negative zero")
}

// TestFloat8E4M3 checks the E4M3 decoder on the values that define the FN variant; the
// fixtures' test compares all 256 bytes with torch.
func TestFloat8E4M3(t *testing.T) {
	for b, want := range map[uint8]float64{
		0x00: 0, 0x38: 1, 0xb8: -1, 0x01: 0x1p-9, 0x08: 0x1p-6, 0x7e: 448, 0xfe: -448,
		0x78: 256, 0x7d: 416, 0x3c: 1.5,
	} {
		require.Equalf(t, want, float64(float8E4M3ToFloat32(b)), "%#02x", b)
	}
	require.True(t, math.IsNaN(float64(float8E4M3ToFloat32(0x7f))))
	require.True(t, math.IsNaN(float64(float8E4M3ToFloat32(0xff))))
}
