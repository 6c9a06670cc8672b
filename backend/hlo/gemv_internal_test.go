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

// A GEMV with the norm takes 4 rows a program where 8 would run fewer than 512
// programs: MiniCPM5-2B's q/k/v, not its gate/up nor its head.
func TestNormTile(t *testing.T) {
	tile := triton.Tile{BN: 8, BK: 512, Stages: 3}
	half := triton.Tile{BN: 4, BK: 512, Stages: 3}
	require.Equal(t, half, normTile(tile, 2560))    // MiniCPM5-2B's q/k/v: 320 programs
	require.Equal(t, tile, normTile(tile, 12288))   // its gate/up: 1536
	require.Equal(t, tile, normTile(tile, 130560))  // its head
	require.Equal(t, tile, normTile(tile, 6912))    // MiniCPM-2B's q/k/v: 864
	require.Equal(t, tile, normTile(tile, 4096))    // 512 programs
	require.Equal(t, half, normTile(tile, 4088))    // 511
	other := triton.Tile{BN: 16, BK: 64, Stages: 3} // not gemvTiles' one-row tile
	require.Equal(t, other, normTile(other, 192))
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
// up to 32 rows fp8ManyRowsTile of their rows rounded up to a power of two, both fitted
// to W and with their K loop split as splitK does (3 stages over MiniCPM5-2B's steps of
// K, as measured), and gemvTile's up to 4 rows where no Dot tile fits; none past that.
func TestFP8Tile(t *testing.T) {
	many := func(rows, split int) triton.Tile {
		t := fp8ManyRowsTile
		t.BM, t.Split = rows, split
		return t
	}
	split := func(n int) triton.Tile {
		t := fp8DotTile
		t.Split = n
		return t
	}
	fixture := triton.Tile{BN: 64, BK: 64, Stages: 3, Warps: 4, Dot: true}
	requireTiles(t, fp8Tile, []tileCase{
		{1, 12288, 2048, triton.Tile{BN: 8, BK: 1024, Stages: 3}, true}, // MiniCPM5-2B's gate/up, AR step
		{1, 192, 64, triton.Tile{BN: 8, BK: 64, Stages: 1}, true},       // the fixtures'
		{2, 2560, 2048, split(16), true},                                // its qkv: 20 W tiles
		{4, 2048, 6144, split(16), true},                                // its down, denoise step: 16, K of 48 steps
		{8, 2560, 2048, split(16), true},                                // its qkv, fused step
		{8, 12288, 2048, split(4), true},                                // its gate/up: 96 W tiles
		{4, 192, 64, fixture, true},                                     // the fixtures', fitted
		{8, 192, 64, fixture, true},
		{8, 2304, 5760, split(15), true}, // MiniCPM-2B's down: 18 W tiles, K of 45 steps
		{12, 2560, 2048, split(16), true},
		{17, 2560, 2048, many(32, 8), true},  // 40 W tiles of 64
		{32, 2560, 2048, many(32, 8), true},  // denoise steps at batch 8
		{32, 2048, 6144, many(32, 8), true},  // 32 W tiles, K of 24 steps
		{32, 12288, 2048, many(32, 2), true}, // gate/up: 192 W tiles
		{32, 2304, 5760, triton.Tile{BM: 32, BN: 64, BK: 128, Stages: 3, Warps: 8, Dot: true, Split: 9}, true}, // MiniCPM-2B's down, fitted: 36 W tiles
		{33, 2560, 2048, triton.Tile{}, false}, // XLA's GEMM on the bytes
		{64, 2560, 2048, triton.Tile{}, false}, // fused steps at batch 8
		{32, 192, 64, triton.Tile{BM: 32, BN: 64, BK: 64, Stages: 3, Warps: 8, Dot: true}, true},
		{8, 48, 160, triton.Tile{BN: 16, BK: 32, Stages: 3, Warps: 4, Dot: true, Split: 5}, true}, // fitted to the floor
		{8, 40, 160, triton.Tile{}, false},                                                        // no BN of 16 or more divides N
	})
}

// fitDotTile halves a Dot tile's K step, then its W rows, until they divide W, down
// to 32 and 16.
func TestFitDotTile(t *testing.T) {
	tile := triton.Tile{BN: 128, BK: 256, Stages: 3, Dot: true}
	fitted := func(bn, bk int) triton.Tile {
		t := tile
		t.BN, t.BK = bn, bk
		return t
	}
	for _, c := range []struct {
		n, k int
		want triton.Tile
	}{
		{2560, 2048, tile},             // divides already
		{2304, 5760, fitted(128, 128)}, // K of 22.5 steps of 256
		{192, 64, fitted(64, 64)},
		{40, 24, fitted(16, 32)}, // the floors, whether or not they divide
	} {
		require.Equal(t, c.want, fitDotTile(tile, c.n, c.k), "%+v", c)
	}
}

// W8A8 products of 2 to 8 rows take w8a8DotTile, its K loop split, where it divides W;
// none otherwise.
func TestW8A8Tile(t *testing.T) {
	split := func(n int) triton.Tile {
		t := w8a8DotTile
		t.Split = n
		return t
	}
	requireTiles(t, w8a8Tile, []tileCase{
		{1, 2560, 2048, triton.Tile{}, false},
		{2, 2560, 2048, split(16), true}, // 20 W tiles, K of 16 steps
		{8, 2048, 6144, split(16), true}, // 16, K of 48
		{8, 12288, 2048, split(4), true}, // 96
		{9, 2560, 2048, triton.Tile{}, false},
		{4, 192, 64, triton.Tile{}, false},
	})
}

// splitK splits a Dot tile's K loop over the fewest of its steps' divisors that give
// minSplitPrograms with W's tiles, the most of them where none does; none where W has
// as many tiles already or K is one step.
func TestSplitK(t *testing.T) {
	tile := triton.Tile{BN: 32, BK: 512, Stages: 3, Dot: true}
	split := func(n int) triton.Tile {
		t := tile
		t.Split = n
		return t
	}
	requireTiles(t, func(m, n, k int) (triton.Tile, bool) { return splitK(tile, m, n, k), true }, []tileCase{
		{4, 2560, 2048, split(4), true},    // MiniCPM5-2B's qkv: 80 W tiles
		{4, 2048, 2048, split(4), true},    // o: 64, 256 programs, K of 4 steps
		{4, 2048, 6144, split(4), true},    // down: 64, K of 12 steps
		{4, 12288, 2048, tile, true},       // gate/up: 384 already
		{4, 2560, 512, tile, true},         // K of one step
		{8, 2560, 3072, split(6), true},    // K of 6 steps: 3 give 240 programs, 6 give 480
		{8, 2304, 2560, split(5), true},    // 72 W tiles, K of 5 steps: 360 programs
		{8, 2304, 7 * 512, split(7), true}, // a prime count of steps
	})
}
