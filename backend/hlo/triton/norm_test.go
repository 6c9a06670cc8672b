package triton

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The norm kernel reads a row of K values in a tile of K rounded up to a power of two,
// masked, sums its two addends and stores the sum only with Sum, and defines every value
// once; rows past maxRowNormK values are refused.
func TestRowNormTTIR(t *testing.T) {
	for _, r := range []RowNorm{{M: 512, K: 2048, Sum: true}, {M: 4, K: 96}} {
		r.Norm = Norm{InvK: 1 / float32(r.K), Eps: 1e-5}
		text, err := RowNormTTIR(r)
		require.NoError(t, err)
		requireWellFormed(t, text)
		tile := map[int]string{2048: "2048", 96: "128"}[r.K]
		require.Contains(t, text, "%rk = tt.make_range {end = "+tile+" : i32, start = 0 : i32}")
		require.Contains(t, text, "%xgb = arith.truncf %xgf : tensor<1x"+tile+"xf32> to tensor<1x"+tile+"xbf16>")
		if r.Sum {
			require.Contains(t, text, "@norm(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %b: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %s: !tt.ptr<f32>")
			require.Contains(t, text, "%x = arith.addf %av, %bv")
			require.Contains(t, text, "%xx = arith.mulf %x, %x")
			require.Equal(t, 3, strings.Count(text, "tt.store"), "s, inv and xg")
		} else {
			require.Contains(t, text, "@norm(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %g: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %xg: !tt.ptr<bf16>")
			require.Contains(t, text, "%xx = arith.mulf %av, %av")
			require.NotContains(t, text, "%b:")
			require.Equal(t, 2, strings.Count(text, "tt.store"), "inv and xg")
		}
		defined := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^\s*%(\w+)(?::\d+)? =`).FindAllStringSubmatch(text, -1) {
			defined[m[1]]++
		}
		for name, n := range defined {
			require.Equal(t, 1, n, "%%%s is defined %d times", name, n)
		}
	}
	require.ErrorContains(t, CheckRowNorm(RowNorm{M: 4, K: 8192}), "want rows of 1 to 4096 values")

	// A quantized layer's input is the normalised row: x scaled by its 1/rms before
	// its rounding; the rest is the same kernel.
	for _, sum := range []bool{false, true} {
		r := RowNorm{M: 8, K: 2048, Sum: sum, Norm: Norm{InvK: 1.0 / 2048, Eps: 1e-5}}
		after, err := RowNormTTIR(r)
		require.NoError(t, err)
		r.Before = true
		before, err := RowNormTTIR(r)
		require.NoError(t, err)
		requireWellFormed(t, before)
		x := map[bool]string{false: "%av", true: "%x"}[sum]
		require.Contains(t, before, "%xs = arith.mulf "+x+", %ivb : tensor<1x2048xf32>")
		require.Contains(t, before, "%xb = arith.truncf %xs")
		require.Equal(t, after, strings.Replace(withoutLines(before, "%iv2 = ", "%ivb = ", "%xs = "), "arith.truncf %xs", "arith.truncf "+x, 1))
	}
}
