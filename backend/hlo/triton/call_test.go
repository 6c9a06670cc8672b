//go:build cgo && !noxla

package triton

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"
	"github.com/stretchr/testify/require"
)

// GEMV checks its operands and tile, and emits one custom call of XLA's Triton target
// with the kernel's grid and output.
func TestGEMVCall(t *testing.T) {
	b := stablehlo.New("gemv")
	fn := b.Main()
	x, err := fn.NamedInput("x", shapes.Make(dtypes.BFloat16, 3, 256))
	require.NoError(t, err)
	w, err := fn.NamedInput("w", shapes.Make(dtypes.BFloat16, 40, 256))
	require.NoError(t, err)
	x32, err := fn.NamedInput("x32", shapes.Make(dtypes.Float32, 3, 256))
	require.NoError(t, err)
	_, err = GEMV(x32, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "both bfloat16")
	_, err = GEMV(w, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "at 40 rows")
	_, err = GEMV(x, w, Tile{BN: 16, BK: 128, Stages: 1}, dtypes.Float32)
	require.ErrorContains(t, err, "does not divide")
	y, err := GEMV(x, w, Tile{BN: 8, BK: 128, Stages: 1}, dtypes.Float32)
	require.NoError(t, err)
	require.NoError(t, fn.Return(y))
	text, err := b.Build()
	require.NoError(t, err)
	program := string(text)
	require.Equal(t, 1, strings.Count(program, `"`+Target+`"`))
	require.Contains(t, program, "grid_x = 5 : i32")
	require.Contains(t, program, "num_warps = 4 : i32")
	require.Contains(t, program, "-> tensor<3x40xf32>")
}
