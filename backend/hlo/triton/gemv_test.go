package triton

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

func TestCheckGEMV(t *testing.T) {
	require.NoError(t, CheckGEMV(4, 2560, 2048, Tile{8, 256, 3}, dtypes.BFloat16))
	require.NoError(t, CheckGEMV(1, 130560, 2048, Tile{8, 512, 1}, dtypes.Float32))
	for _, c := range []struct {
		m, n, k int
		tile    Tile
		out     dtypes.DType
		want    string
	}{
		{4, 2560, 2048, Tile{8, 512, 1}, dtypes.BFloat16, "128 accumulators"},
		{1, 2560, 200, Tile{8, 256, 1}, dtypes.BFloat16, "does not divide"},
		{1, 2560, 2048, Tile{8, 96, 1}, dtypes.BFloat16, "powers of two"},
		{1, 2560, 2048, Tile{8, 256, 0}, dtypes.BFloat16, "stages positive"},
		{0, 2560, 2048, Tile{8, 256, 1}, dtypes.BFloat16, "must be positive"},
		{1, 2560, 2048, Tile{8, 256, 1}, dtypes.Float16, "only bfloat16 and float32"},
		{1, 1 << 20, 1 << 12, Tile{8, 256, 1}, dtypes.Float32, "int32 offsets"},
	} {
		require.ErrorContains(t, CheckGEMV(c.m, c.n, c.k, c.tile, c.out), c.want, "%+v", c)
	}
	_, err := GEMVTTIR(1, 64, 24, Tile{8, 16, 1}, dtypes.BFloat16)
	require.ErrorContains(t, err, "does not divide")
}

// The float32 output stores the sums, the bfloat16 output rounds them first; the rest of
// the kernel is the same.
func TestGEMVOutputDTypes(t *testing.T) {
	tile := Tile{8, 64, 3}
	bf16, err := GEMVTTIR(2, 96, 128, tile, dtypes.BFloat16)
	require.NoError(t, err)
	f32, err := GEMVTTIR(2, 96, 128, tile, dtypes.Float32)
	require.NoError(t, err)

	require.Equal(t, 2, strings.Count(bf16, "arith.truncf"))
	require.Contains(t, bf16, "%y: !tt.ptr<bf16>")
	require.Contains(t, bf16, "tt.store %yp1, %yt1 : tensor<8x!tt.ptr<bf16>>")
	require.NotContains(t, f32, "arith.truncf")
	require.Contains(t, f32, "%y: !tt.ptr<f32>")
	require.Contains(t, f32, "tt.store %yp1, %sum1 : tensor<8x!tt.ptr<f32>>")
	require.Contains(t, f32, "} {tt.num_stages = 3 : i32}")
	require.Contains(t, f32, "%acc:2 = scf.for")

	// Undo the differences: the rest is the same text.
	var kept []string
	for line := range strings.SplitSeq(bf16, "\n") {
		if !strings.Contains(line, "arith.truncf") {
			kept = append(kept, line)
		}
	}
	same := strings.NewReplacer("ptr<bf16> {tt.divisibility = 16 : i32}) attributes", "ptr<f32> {tt.divisibility = 16 : i32}) attributes",
		"!tt.ptr<bf16> -> tensor<8x!tt.ptr<bf16>>\n    %sum", "!tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>\n    %sum",
		"tensor<8x!tt.ptr<bf16>>, tensor<8xi32>\n    tt.store", "tensor<8x!tt.ptr<f32>>, tensor<8xi32>\n    tt.store",
		"%yt0 : tensor<8x!tt.ptr<bf16>>", "%sum0 : tensor<8x!tt.ptr<f32>>",
		"%yt1 : tensor<8x!tt.ptr<bf16>>", "%sum1 : tensor<8x!tt.ptr<f32>>").Replace(strings.Join(kept, "\n"))
	require.Equal(t, f32, same)
}
