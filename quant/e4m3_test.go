package quant

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// e4m3Fixture is fp8_e4m3fn.json: torch 2.11 casts of float32 probes and the value of
// every byte.
type e4m3Fixture struct {
	Rows []struct {
		InputBits      uint32   `json:"input_bits"`
		Input          *float64 `json:"input"` // null for infinities.
		CastByte       uint8    `json:"cast_byte"`
		SaturatingByte uint8    `json:"saturating_byte"`
	} `json:"rows"`
	Decode []*float64 `json:"decode"` // null for NaN.
}

func loadE4M3Fixture(t testing.TB) *e4m3Fixture {
	t.Helper()
	data, err := os.ReadFile(fixtures.Dir(t, "fp8_e4m3fn.json"))
	require.NoError(t, err)
	var f e4m3Fixture
	require.NoError(t, json.Unmarshal(data, &f))
	require.NotEmpty(t, f.Rows)
	require.Len(t, f.Decode, 256)
	return &f
}

// expectedDecode returns the fixture's value of byte b and whether it is NaN.
func (f *e4m3Fixture) expectedDecode(b int) (float32, bool) {
	if f.Decode[b] == nil {
		return float32(math.NaN()), true
	}
	return float32(*f.Decode[b]), false
}

func TestEncodeE4M3Fixture(t *testing.T) {
	f := loadE4M3Fixture(t)
	for i, row := range f.Rows {
		v := math.Float32frombits(row.InputBits)
		if row.Input != nil {
			require.Equal(t, *row.Input, float64(v), "row %d: input and input_bits disagree", i)
		} else {
			require.True(t, math.IsInf(float64(v), 0), "row %d: null input must be infinite", i)
		}
		assert.Equal(t, row.CastByte, EncodeE4M3(v, false), "row %d: cast of %g (bits %#08x)", i, v, row.InputBits)
		assert.Equal(t, row.SaturatingByte, EncodeE4M3(v, true), "row %d: saturating cast of %g (bits %#08x)", i, v, row.InputBits)
	}
}

func TestDecodeE4M3Fixture(t *testing.T) {
	f := loadE4M3Fixture(t)
	table := E4M3DecodeTable()
	for b := range 256 {
		want, isNaN := f.expectedDecode(b)
		got := DecodeE4M3(uint8(b))
		assert.Equal(t, math.Float32bits(got), math.Float32bits(table[b]), "byte %#02x: table and DecodeE4M3 differ", b)
		if isNaN {
			assert.True(t, math.IsNaN(float64(got)), "byte %#02x: want NaN, got %g", b, got)
			assert.Equal(t, uint32(b&0x80)<<24|0x7fc00000, math.Float32bits(got), "byte %#02x: NaN bits", b)
			continue
		}
		// Compare bits so that -0 (0x80) is told from +0.
		assert.Equal(t, math.Float32bits(want), math.Float32bits(got), "byte %#02x: want %g, got %g", b, want, got)
	}
}

func TestE4M3SlicesFixture(t *testing.T) {
	f := loadE4M3Fixture(t)
	const scale = 0.25 // A power of two: v/scale is exact, so the bytes must not change.
	src := make([]float32, len(f.Rows))
	for i, row := range f.Rows {
		src[i] = math.Float32frombits(row.InputBits) * scale
	}
	cast := make([]uint8, len(src))
	saturated := make([]uint8, len(src))
	EncodeE4M3Slice(cast, src, scale, false)
	EncodeE4M3Slice(saturated, src, scale, true)
	for i, row := range f.Rows {
		assert.Equal(t, row.CastByte, cast[i], "row %d", i)
		assert.Equal(t, row.SaturatingByte, saturated[i], "row %d", i)
	}

	all := make([]uint8, 256)
	for b := range all {
		all[b] = uint8(b)
	}
	for _, scale := range []float32{1, 0.25, 3.7e-3} {
		got := make([]float32, 256)
		DecodeE4M3Slice(got, all, scale)
		for b := range all {
			want, isNaN := f.expectedDecode(b)
			if isNaN {
				assert.True(t, math.IsNaN(float64(got[b])), "byte %#02x", b)
				continue
			}
			assert.Equal(t, math.Float32bits(want*scale), math.Float32bits(got[b]), "byte %#02x scale %g", b, scale)
		}
	}
}

func TestE4M3SliceChecks(t *testing.T) {
	assert.Panics(t, func() { EncodeE4M3Slice(make([]uint8, 2), make([]float32, 3), 1, false) })
	assert.Panics(t, func() { DecodeE4M3Slice(make([]float32, 3), make([]uint8, 2), 1) })
	for _, bad := range []float32{0, -1, float32(math.Inf(1)), float32(math.NaN())} {
		assert.Panics(t, func() { EncodeE4M3Slice(nil, nil, bad, false) }, "scale %g", bad)
		assert.Panics(t, func() { DecodeE4M3Slice(nil, nil, bad) }, "scale %g", bad)
	}
}

// TestE4M3RoundTrip checks Encode(Decode(b)) == b for every non-NaN byte, in both modes.
func TestE4M3RoundTrip(t *testing.T) {
	for b := range 256 {
		v := DecodeE4M3(uint8(b))
		if uint8(b)&0x7f == E4M3NaN {
			require.True(t, math.IsNaN(float64(v)), "byte %#02x", b)
			continue
		}
		require.Equal(t, uint8(b), EncodeE4M3(v, false), "byte %#02x (value %g)", b, v)
		require.Equal(t, uint8(b), EncodeE4M3(v, true), "byte %#02x (value %g)", b, v)
	}
}

func TestEncodeE4M3Special(t *testing.T) {
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(math.Float32bits(nan) | 1<<31)
	for _, saturate := range []bool{false, true} {
		assert.Equal(t, uint8(0x7f), EncodeE4M3(nan, saturate))
		assert.Equal(t, uint8(0xff), EncodeE4M3(negNaN, saturate))
		assert.Equal(t, uint8(0x00), EncodeE4M3(0, saturate))
		assert.Equal(t, uint8(0x80), EncodeE4M3(float32(math.Copysign(0, -1)), saturate))
		assert.Equal(t, uint8(0x00), EncodeE4M3(math.SmallestNonzeroFloat32, saturate))
		assert.Equal(t, uint8(0x01), EncodeE4M3(math.Nextafter32(1.0/1024, 1), saturate)) // just above half of 2^-9
		assert.Equal(t, uint8(0x00), EncodeE4M3(1.0/1024, saturate))                      // tie to even (0)
		assert.Equal(t, uint8(0x02), EncodeE4M3(3.0/1024, saturate))                      // tie to even (2)
		assert.Equal(t, uint8(0x08), EncodeE4M3(7.75/512, saturate))                      // 7.75 × 2^-9 rounds up to 2^-6
	}
	assert.Equal(t, uint8(0x7e), EncodeE4M3(464, false)) // tie between 448 and (missing) 480: even is 448
	assert.Equal(t, uint8(0x7f), EncodeE4M3(math.Nextafter32(464, 500), false))
	assert.Equal(t, uint8(0x7e), EncodeE4M3(math.Nextafter32(464, 500), true))
	assert.Equal(t, uint8(0xfe), EncodeE4M3(-479.99, true))
	assert.Equal(t, uint8(0xff), EncodeE4M3(-479.99, false))
	assert.Equal(t, uint8(0x7e), EncodeE4M3(math.MaxFloat32, true))
}

// referenceEncode is an independent, slow E4M3 encoder: it searches the sorted positive
// values for the nearest one in float64, ties to the even byte, treating 480 as byte 0x7f
// (the NaN) the way a cast that ignores the NaN encoding does.
func referenceEncode(v float32, saturate bool) uint8 {
	if math.IsNaN(float64(v)) {
		if math.Signbit(float64(v)) {
			return 0xff
		}
		return 0x7f
	}
	var sign uint8
	x := float64(v)
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if saturate {
		x = math.Min(x, E4M3Max)
	}
	grid := referenceGrid()
	if x >= grid[len(grid)-1] {
		return sign | 0x7f
	}
	i := sort.SearchFloat64s(grid, x) // First grid value >= x.
	if grid[i] == x {
		return sign | uint8(i)
	}
	lo, hi := grid[i-1], grid[i]
	mid := (lo + hi) / 2 // Exact in float64.
	switch {
	case x < mid:
		return sign | uint8(i-1)
	case x > mid:
		return sign | uint8(i)
	case (i-1)%2 == 0:
		return sign | uint8(i-1)
	default:
		return sign | uint8(i)
	}
}

var refGrid []float64

// referenceGrid returns the 127 finite non-negative values of bytes 0x00-0x7e, then 480.
func referenceGrid() []float64 {
	if refGrid == nil {
		for b := range 0x7f {
			refGrid = append(refGrid, float64(DecodeE4M3(uint8(b))))
		}
		refGrid = append(refGrid, 480)
	}
	return refGrid
}

// TestEncodeE4M3Reference compares the encoder with referenceEncode on every code point
// and its float32 neighbours, on every midpoint and its neighbours, and on a stride
// through all float32 bit patterns (every float32 of the E4M3 range unless -short).
func TestEncodeE4M3Reference(t *testing.T) {
	check := func(v float32) {
		for _, saturate := range []bool{false, true} {
			if got, want := EncodeE4M3(v, saturate), referenceEncode(v, saturate); got != want {
				t.Fatalf("EncodeE4M3(%g [bits %#08x], saturate=%v) = %#02x, reference %#02x",
					v, math.Float32bits(v), saturate, got, want)
			}
		}
	}
	grid := referenceGrid()
	for i := range grid {
		points := []float32{float32(grid[i])}
		if i+1 < len(grid) {
			points = append(points, float32((grid[i]+grid[i+1])/2))
		}
		for _, p := range points {
			for _, s := range []float32{p, -p} {
				lo, hi := s, s
				for range 64 {
					check(lo)
					check(hi)
					lo = math.Nextafter32(lo, float32(math.Inf(-1)))
					hi = math.Nextafter32(hi, float32(math.Inf(1)))
				}
			}
		}
	}
	for bits := uint64(0); bits < 1<<32; bits += 9973 {
		check(math.Float32frombits(uint32(bits)))
	}
	if testing.Short() {
		return
	}
	// Exhaustive over [2^-11, 512), both signs: everything that rounds other than to 0 or NaN.
	for bits := uint32(0x3a000000); bits < 0x44000000; bits++ {
		v := math.Float32frombits(bits)
		if EncodeE4M3(v, false) != referenceEncode(v, false) || EncodeE4M3(-v, true) != referenceEncode(-v, true) {
			check(v)
			check(-v)
		}
	}
}

func BenchmarkEncodeE4M3Slice(b *testing.B) {
	const n = 1 << 20
	// Weight-like data: normally distributed, scaled so that about 4.5 standard deviations
	// reach 448; a few percent land in the subnormal range, a few saturate.
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 100)
	}
	dst := make([]uint8, n)
	for _, tc := range []struct {
		name  string
		scale float32
	}{{"scale=1", 1}, {"scale=0.37", 0.37}} {
		scaled := make([]float32, n) // Same distribution after the division.
		for i, v := range src {
			scaled[i] = v * tc.scale
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n * 4) // float32 bytes read.
			for b.Loop() {
				EncodeE4M3Slice(dst, scaled, tc.scale, true)
			}
		})
	}
}

func BenchmarkDecodeE4M3Slice(b *testing.B) {
	const n = 1 << 20
	src := make([]uint8, n)
	for i := range src {
		src[i] = uint8(i * 131)
	}
	dst := make([]float32, n)
	for _, tc := range []struct {
		name  string
		scale float32
	}{{"scale=1", 1}, {"scale=0.37", 0.37}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n) // FP8 bytes read.
			for b.Loop() {
				DecodeE4M3Slice(dst, src, tc.scale)
			}
		})
	}
}
