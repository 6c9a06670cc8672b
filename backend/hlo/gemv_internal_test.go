//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// tileCase is a product of m rows of W [n, k] and the tile it wants, if ok.
type tileCase struct {
	m, n, k int
	want    triton.Tile
	ok      bool
}

// requireTiles checks that tileOf gives each case its tile.
func requireTiles(t *testing.T, tileOf func(m, n, k int) (triton.Tile, bool), cases []tileCase) {
	t.Helper()
	for _, c := range cases {
		got, ok := tileOf(c.m, c.n, c.k)
		require.Equal(t, c.ok, ok, "%+v", c)
		if ok {
			require.Equal(t, c.want, got, "%+v", c)
		}
	}
}

func TestGEMVTile(t *testing.T) {
	tile := func(bn, bk, stages int) triton.Tile { return triton.Tile{BN: bn, BK: bk, Stages: stages} }
	requireTiles(t, gemvTile, []tileCase{
		{1, 12288, 2048, tile(8, 512, 3), true},  // MiniCPM5-2B's gate/up
		{4, 2048, 6144, tile(8, 256, 3), true},   // its down
		{2, 130560, 2048, tile(8, 256, 3), true}, // its head
		{4, 2048, 512, tile(8, 256, 1), true},    // 2 K steps: not pipelined
		{4, 192, 64, tile(8, 64, 1), true},       // the fixtures'
		{3, 64, 160, tile(8, 32, 3), true},
		{4, 96, 24, triton.Tile{}, false},      // no K step of 16 or more divides K
		{4, 36, 64, triton.Tile{}, false},      // BN does not divide N
		{8, 2560, 2048, tile(16, 64, 3), true}, // the fused step's qkv
		{5, 96, 64, tile(16, 64, 1), true},
		{5, 40, 64, triton.Tile{}, false}, // BN 16 does not divide N
		{9, 96, 64, triton.Tile{}, false},
		{0, 96, 64, triton.Tile{}, false},
	})
}

// triton=gemv lowers only the products measured faster than XLA's dot: one row and W
// of at least 8 Mi entries.
func TestLowersWhereFaster(t *testing.T) {
	require.True(t, lowersWhereFaster(1, 12288, 2048))   // MiniCPM5-2B's gate/up
	require.True(t, lowersWhereFaster(1, 2048, 6144))    // its down
	require.True(t, lowersWhereFaster(1, 130560, 2048))  // its head
	require.True(t, lowersWhereFaster(1, 4096, 2048))    // 8 Mi entries
	require.False(t, lowersWhereFaster(1, 2560, 2048))   // its qkv
	require.False(t, lowersWhereFaster(1, 2048, 2048))   // its o
	require.False(t, lowersWhereFaster(4, 12288, 2048))  // 4 rows
	require.False(t, lowersWhereFaster(1, 4096-8, 2048)) // just under 8 Mi
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

// FP8 products of 1 row take fp8RowTile, of 2 to 16 rows the tensor-core tile and of
// up to 32 rows fp8ManyRowsTile of 32 rows, where they
// divide W (3 stages over MiniCPM5-2B's 2 steps of K, as measured), and gemvTile's up to
// 4 rows where they do not (the fixtures' small weights); none past that.
func TestFP8Tile(t *testing.T) {
	many := func(rows int) triton.Tile {
		t := fp8ManyRowsTile
		t.BM = rows
		return t
	}
	requireTiles(t, fp8Tile, []tileCase{
		{1, 12288, 2048, triton.Tile{BN: 8, BK: 1024, Stages: 3}, true}, // MiniCPM5-2B's gate/up, AR step
		{1, 192, 64, triton.Tile{BN: 8, BK: 64, Stages: 1}, true},       // the fixtures'
		{2, 2560, 2048, fp8DotTile, true},
		{4, 2048, 6144, fp8DotTile, true},                         // its down, denoise step
		{8, 2560, 2048, fp8DotTile, true},                         // its qkv, fused step
		{4, 192, 64, triton.Tile{BN: 8, BK: 64, Stages: 1}, true}, // the fixtures'
		{8, 192, 64, triton.Tile{}, false},
		{12, 2560, 2048, fp8DotTile, true},
		{17, 2560, 2048, many(32), true},
		{32, 2560, 2048, many(32), true}, // fused decoding at batch 8
		{24, 2048, 6144, many(32), true},
		{33, 2560, 2048, triton.Tile{}, false},
		{32, 192, 64, triton.Tile{}, false},
	})
}

// W8A8 products of 2 to 8 rows take fp8DotTile where it divides W; none otherwise.
func TestW8A8Tile(t *testing.T) {
	requireTiles(t, w8a8Tile, []tileCase{
		{1, 2560, 2048, triton.Tile{}, false},
		{2, 2560, 2048, fp8DotTile, true},
		{8, 2048, 6144, fp8DotTile, true},
		{9, 2560, 2048, triton.Tile{}, false},
		{4, 192, 64, triton.Tile{}, false},
	})
}

// The experiment's split K loop: none unless BLOCKDIFF_SPLITK asks; "auto" doubles the
// split until the programs reach minSplitPrograms or K stops dividing; only Dot tiles.
func TestExperimentSplit(t *testing.T) {
	require.Zero(t, experimentSplit(fp8DotTile, 4, 2560, 2048).Split)
	t.Setenv("BLOCKDIFF_SPLITK", "auto")
	require.Equal(t, 4, experimentSplit(fp8DotTile, 4, 2560, 2048).Split) // qkv: 80 W tiles
	require.Equal(t, 4, experimentSplit(fp8DotTile, 4, 2048, 6144).Split) // down: 64, K 12 steps
	require.Zero(t, experimentSplit(fp8DotTile, 4, 12288, 2048).Split)    // gate/up: 384 already
	require.Zero(t, experimentSplit(fp8RowTile, 1, 2560, 2048).Split)     // not a Dot tile
	t.Setenv("BLOCKDIFF_SPLITK", "2")
	require.Equal(t, 2, experimentSplit(fp8DotTile, 4, 12288, 2048).Split)
	require.Zero(t, experimentSplit(fp8DotTile, 4, 2560, 512).Split) // K of one step
}

// The experiment's bf16 Dot tile: BLOCKDIFF_BF16_DOT's, for 2 to 8 rows where it fits.
func TestExperimentBF16DotTile(t *testing.T) {
	_, ok := experimentBF16DotTile(4, 2560, 2048)
	require.False(t, ok)
	t.Setenv("BLOCKDIFF_BF16_DOT", "dot32x256/s3")
	requireTiles(t, experimentBF16DotTile, []tileCase{
		{4, 2560, 2048, triton.Tile{BN: 32, BK: 256, Stages: 3, Dot: true}, true},
		{1, 2560, 2048, triton.Tile{}, false},
		{9, 2560, 2048, triton.Tile{}, false},
		{4, 192, 64, triton.Tile{}, false},
	})
}
