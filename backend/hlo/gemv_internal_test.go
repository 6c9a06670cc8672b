//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

func TestGEMVTile(t *testing.T) {
	tile := func(bn, bk, stages int) triton.Tile { return triton.Tile{BN: bn, BK: bk, Stages: stages} }
	for _, c := range []struct {
		m, n, k int
		want    triton.Tile
		ok      bool
	}{
		{1, 12288, 2048, tile(8, 512, 1), true},  // MiniCPM5-2B's gate/up
		{4, 2048, 6144, tile(8, 256, 1), true},   // its down
		{2, 130560, 2048, tile(8, 256, 1), true}, // its head
		{4, 192, 64, tile(8, 64, 1), true},       // the fixtures'
		{3, 64, 160, tile(8, 32, 1), true},
		{4, 96, 24, triton.Tile{}, false},      // no K step of 16 or more divides K
		{4, 36, 64, triton.Tile{}, false},      // BN does not divide N
		{8, 2560, 2048, tile(8, 128, 1), true}, // the fused step's qkv
		{5, 96, 64, tile(8, 64, 1), true},
		{9, 96, 64, triton.Tile{}, false},
		{0, 96, 64, triton.Tile{}, false},
	} {
		got, ok := gemvTile(c.m, c.n, c.k)
		require.Equal(t, c.ok, ok, "%+v", c)
		if ok {
			require.Equal(t, c.want, got, "%+v", c)
		}
	}

	// A pipelined tile keeps its stages where the K loop is long enough.
	saved := gemvTiles[4]
	defer func() { gemvTiles[4] = saved }()
	gemvTiles[4] = tile(8, 256, 3)
	got, _ := gemvTile(4, 2048, 2048)
	require.Equal(t, tile(8, 256, 3), got)
	got, _ = gemvTile(4, 2048, 512)
	require.Equal(t, tile(8, 256, 1), got, "2 K steps: not pipelined")
}

func TestGEMVOutput(t *testing.T) {
	for _, c := range []struct {
		accumulator, output, want dtypes.DType
		ok                        bool
	}{
		{dtypes.InvalidDType, dtypes.InvalidDType, dtypes.BFloat16, true},
		{dtypes.Float32, dtypes.InvalidDType, dtypes.Float32, true}, // GoMLX's Dot of bf16
		{dtypes.Float32, dtypes.BFloat16, dtypes.BFloat16, true},
		{dtypes.InvalidDType, dtypes.Float32, dtypes.Float32, true},
		{dtypes.BFloat16, dtypes.InvalidDType, dtypes.InvalidDType, false},
		{dtypes.Float32, dtypes.Float16, dtypes.Float16, false},
	} {
		got, ok := gemvOutput(compute.DotGeneralConfig{AccumulatorDType: c.accumulator, OutputDType: c.output})
		require.Equal(t, c.ok, ok, "%+v", c)
		if ok {
			require.Equal(t, c.want, got, "%+v", c)
		}
	}
}
