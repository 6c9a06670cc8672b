package triton

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

func TestCheckGEMV(t *testing.T) {
	require.NoError(t, CheckGEMV(4, 2560, 2048, Tile{BN: 8, BK: 256, Stages: 3}, dtypes.BFloat16))
	require.NoError(t, CheckGEMV(1, 130560, 2048, Tile{BN: 8, BK: 512, Stages: 1}, dtypes.Float32))
	for _, c := range []struct {
		m, n, k int
		tile    Tile
		out     dtypes.DType
		want    string
	}{
		{4, 2560, 2048, Tile{BN: 8, BK: 512, Stages: 1}, dtypes.BFloat16, "128 accumulators"},
		{1, 2560, 200, Tile{BN: 8, BK: 256, Stages: 1}, dtypes.BFloat16, "does not divide"},
		{1, 2560, 2048, Tile{BN: 8, BK: 96, Stages: 1}, dtypes.BFloat16, "powers of two"},
		{1, 2560, 2048, Tile{BN: 8, BK: 256, Stages: 0}, dtypes.BFloat16, "stages positive"},
		{0, 2560, 2048, Tile{BN: 8, BK: 256, Stages: 1}, dtypes.BFloat16, "must be positive"},
		{1, 2560, 2048, Tile{BN: 8, BK: 256, Stages: 1}, dtypes.Float16, "only bfloat16 and float32"},
		{1, 1 << 20, 1 << 12, Tile{BN: 8, BK: 256, Stages: 1}, dtypes.Float32, "int32 offsets"},
	} {
		require.ErrorContains(t, CheckGEMV(c.m, c.n, c.k, c.tile, c.out), c.want, "%+v", c)
	}
	_, err := GEMVTTIR(1, 64, 24, Tile{BN: 8, BK: 16, Stages: 1}, dtypes.BFloat16, dtypes.BFloat16)
	require.ErrorContains(t, err, "does not divide")
}

// The float32 output stores the sums, the bfloat16 output rounds them first; the rest of
// the kernel is the same.
func TestGEMVOutputDTypes(t *testing.T) {
	tile := Tile{BN: 8, BK: 64, Stages: 3}
	bf16 := mustGEMV(t, 2, 96, 128, tile, dtypes.BFloat16, dtypes.BFloat16)
	f32 := mustGEMV(t, 2, 96, 128, tile, dtypes.BFloat16, dtypes.Float32)

	require.Equal(t, 2, strings.Count(bf16, "arith.truncf"))
	require.Contains(t, bf16, "%y: !tt.ptr<bf16>")
	require.Contains(t, bf16, "tt.store %yp1, %yt1 : tensor<8x!tt.ptr<bf16>>")
	require.NotContains(t, f32, "arith.truncf")
	require.Contains(t, f32, "%y: !tt.ptr<f32>")
	require.Contains(t, f32, "tt.store %yp1, %sum1 : tensor<8x!tt.ptr<f32>>")
	require.Contains(t, f32, "} {tt.num_stages = 3 : i32}")
	require.Contains(t, f32, "%acc:2 = scf.for")

	// Undo the differences: the rest is the same text.
	same := strings.NewReplacer("ptr<bf16> {tt.divisibility = 16 : i32}) attributes", "ptr<f32> {tt.divisibility = 16 : i32}) attributes",
		"!tt.ptr<bf16> -> tensor<8x!tt.ptr<bf16>>\n    %sum", "!tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>\n    %sum",
		"tensor<8x!tt.ptr<bf16>>, tensor<8xi32>\n    tt.store", "tensor<8x!tt.ptr<f32>>, tensor<8xi32>\n    tt.store",
		"%yt0 : tensor<8x!tt.ptr<bf16>>", "%sum0 : tensor<8x!tt.ptr<f32>>",
		"%yt1 : tensor<8x!tt.ptr<bf16>>", "%sum1 : tensor<8x!tt.ptr<f32>>").Replace(withoutLines(bf16, "arith.truncf"))
	require.Equal(t, f32, same)
}

// withoutLines is text less its lines that contain any of marks.
func withoutLines(text string, marks ...string) string {
	var kept []string
	for line := range strings.SplitSeq(text, "\n") {
		if !slices.ContainsFunc(marks, func(mark string) bool { return strings.Contains(line, mark) }) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// mustGEMV is GEMVTTIR's kernel, which must be written.
func mustGEMV(t *testing.T, m, n, k int, tile Tile, w, out dtypes.DType) string {
	t.Helper()
	text, err := GEMVTTIR(m, n, k, tile, w, out)
	require.NoError(t, err)
	return text
}

// requireKernel checks that text, a kernel's TTIR, holds every line of wants and is
// well formed (requireWellFormed).
func requireKernel(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		require.Contains(t, text, want)
	}
	requireWellFormed(t, text)
}

// checkCase is a tile that CheckGEMV rejects at m rows of W [2560, 2048] (MiniCPM5-2B's
// qkv), with what its error says.
type checkCase struct {
	m    int
	tile Tile
	want string
}

// requireCheckErrors checks each case's error.
func requireCheckErrors(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		require.ErrorContains(t, CheckGEMV(c.m, 2560, 2048, c.tile, dtypes.BFloat16), c.want, "%+v", c)
	}
}

// A Dot tile's kernel multiplies x padded to DotRows rows (rows past m-1 read row m-1)
// by Wᵀ's tile on the tensor cores and stores only x's rows; it needs tt.dot's sides.
func TestDotTile(t *testing.T) {
	tile := Tile{BN: 32, BK: 128, Stages: 3, Dot: true}
	require.Equal(t, "dot32x128/s3", tile.String())
	require.Equal(t, 4, tile.Accumulators(8))
	require.NoError(t, CheckGEMV(4, 2560, 2048, tile, dtypes.BFloat16))
	require.NoError(t, CheckGEMV(16, 2560, 2048, tile, dtypes.Float32))
	requireCheckErrors(t, []checkCase{
		{17, tile, "a Dot tile needs"},
		{4, Tile{BN: 8, BK: 128, Stages: 3, Dot: true}, "a Dot tile needs"},
		{4, Tile{BN: 32, BK: 8, Stages: 1, Dot: true}, "a Dot tile needs"},
	})

	bf16 := mustGEMV(t, 4, 2560, 2048, tile, dtypes.BFloat16, dtypes.BFloat16)
	requireKernel(t, bf16,
		"%mlast = arith.constant dense<3> : tensor<16xi32>",
		"%xv = tt.load %xp : tensor<16x128x!tt.ptr<bf16>>",
		"%wv = tt.load %wp : tensor<128x32x!tt.ptr<bf16>>",
		"%d = tt.dot %xv, %wv, %a : tensor<16x128xbf16> * tensor<128x32xbf16> -> tensor<16x32xf32>",
		"} {tt.num_stages = 3 : i32}",
		"%mr = arith.constant dense<4> : tensor<16xi32>",
		"%yt = arith.truncf %acc : tensor<16x32xf32> to tensor<16x32xbf16>",
		"tt.store %yp, %yt, %store : tensor<16x32x!tt.ptr<bf16>>",
	)
	f32 := mustGEMV(t, 4, 2560, 2048, tile, dtypes.BFloat16, dtypes.Float32)
	require.NotContains(t, f32, "arith.truncf")
	require.Contains(t, f32, "tt.store %yp, %acc, %store : tensor<16x32x!tt.ptr<f32>>")
}

// A Dot tile with BM multiplies BM rows of x, for up to BM rows: its kernel is the
// Dot tile's with tensors of BM rows; BM 16 writes the kernel of the tile without it.
func TestDotTileRows(t *testing.T) {
	tile := Tile{BM: 32, BN: 32, BK: 128, Stages: 3, Dot: true}
	require.Equal(t, "dot32x32x128/s3", tile.String())
	require.Equal(t, 8, tile.Accumulators(20))
	require.NoError(t, CheckGEMV(20, 2560, 2048, tile, dtypes.BFloat16))
	requireCheckErrors(t, []checkCase{
		{40, tile, "at most 32 rows"},
		{40, Tile{BN: 32, BK: 128, Stages: 3, Dot: true}, "at most 16 rows"},
		{40, Tile{BM: 32, BN: 8, BK: 128, Stages: 3}, "of a Dot tile"},
		{40, Tile{BM: 8, BN: 32, BK: 128, Stages: 3, Dot: true}, "at least 16"},
		{40, Tile{BM: 48, BN: 32, BK: 128, Stages: 3, Dot: true}, "power of two"},
		{40, Tile{BM: 128, BN: 128, BK: 64, Stages: 3, Dot: true}, "accumulators"},
	})

	fp8 := mustGEMV(t, 20, 2560, 2048, tile, dtypes.Uint8, dtypes.BFloat16)
	requireKernel(t, fp8,
		"%rm = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>",
		"%mlast = arith.constant dense<19> : tensor<32xi32>",
		"%d = tt.dot %xv, %wb, %a : tensor<32x128xbf16> * tensor<128x32xbf16> -> tensor<32x32xf32>",
		"%mr = arith.constant dense<20> : tensor<32xi32>",
	)

	plain := Tile{BN: 32, BK: 128, Stages: 3, Dot: true}
	want := mustGEMV(t, 8, 2560, 2048, plain, dtypes.Uint8, dtypes.BFloat16)
	plain.BM = DotRows
	got := mustGEMV(t, 8, 2560, 2048, plain, dtypes.Uint8, dtypes.BFloat16)
	require.Equal(t, want, got)
}

// A uint8 W is FP8 E4M3FN bytes: the kernel's W pointer and loads are of f8E4M3FN,
// each tile converted through float16 to float32 (to bfloat16 for a Dot tile's
// tt.dot); the rest of the kernel, x's loads included, is the bfloat16 W's. Other W
// dtypes are refused.
func TestGEMVFP8Weight(t *testing.T) {
	tile := Tile{BN: 8, BK: 64, Stages: 3}
	bf16 := mustGEMV(t, 2, 96, 128, tile, dtypes.BFloat16, dtypes.Float32)
	fp8 := mustGEMV(t, 2, 96, 128, tile, dtypes.Uint8, dtypes.Float32)
	requireKernel(t, fp8,
		"%w: !tt.ptr<f8E4M3FN>",
		"%wv = tt.load %wp : tensor<8x64x!tt.ptr<f8E4M3FN>>",
		"%wh = tt.fp_to_fp %wv : tensor<8x64xf8E4M3FN> -> tensor<8x64xf16>",
		"%wf = arith.extf %wh : tensor<8x64xf16> to tensor<8x64xf32>",
		"%xv1 = tt.load %xk1 : tensor<64x!tt.ptr<bf16>>",
	)

	same := strings.NewReplacer("f8E4M3FN", "bf16", "%wf = arith.extf %wh : tensor<8x64xf16>", "%wf = arith.extf %wv : tensor<8x64xbf16>").
		Replace(withoutLines(fp8, "tt.fp_to_fp"))
	require.Equal(t, bf16, same)

	_, err := GEMVTTIR(2, 96, 128, tile, dtypes.Float32, dtypes.Float32)
	require.ErrorContains(t, err, "only bfloat16, or uint8")

	// A Dot tile converts the FP8 tile to bfloat16 for tt.dot, exactly.
	dot := Tile{BN: 16, BK: 64, Stages: 1, Dot: true}
	bf16 = mustGEMV(t, 8, 96, 128, dot, dtypes.BFloat16, dtypes.Float32)
	fp8 = mustGEMV(t, 8, 96, 128, dot, dtypes.Uint8, dtypes.Float32)
	requireKernel(t, fp8,
		"%wv = tt.load %wp : tensor<64x16x!tt.ptr<f8E4M3FN>>",
		"%wb = arith.truncf %wf : tensor<64x16xf32> to tensor<64x16xbf16>",
		"%d = tt.dot %xv, %wb, %a",
	)
	same = strings.NewReplacer("f8E4M3FN", "bf16", "tt.dot %xv, %wb", "tt.dot %xv, %wv").Replace(withoutLines(fp8, "%wh = ", "%wf = ", "%wb = "))
	require.Equal(t, bf16, same)
}

// The FP8 × FP8 kernel reads x's bytes too and multiplies both on the
// tensor cores as FP8, converting nothing; the rest is the Dot tile's kernel.
func TestGEMVFP8X(t *testing.T) {
	tile := Tile{BN: 16, BK: 64, Stages: 1, Dot: true}
	fp8, err := GEMVFP8TTIR(8, 96, 128, tile, dtypes.BFloat16)
	require.NoError(t, err)
	requireKernel(t, fp8,
		"%x: !tt.ptr<f8E4M3FN>",
		"%xv = tt.load %xp : tensor<16x64x!tt.ptr<f8E4M3FN>>",
		"%d = tt.dot %xv, %wv, %a : tensor<16x64xf8E4M3FN> * tensor<64x16xf8E4M3FN> -> tensor<16x16xf32>",
		"%y: !tt.ptr<bf16>",
	)
	require.NotContains(t, fp8, "tt.fp_to_fp")
	// With a float32 y, x's pointers are the weight-only kernel's only bfloat16 ones.
	weightOnly := mustGEMV(t, 8, 96, 128, tile, dtypes.Uint8, dtypes.Float32)
	fp8, err = GEMVFP8TTIR(8, 96, 128, tile, dtypes.Float32)
	require.NoError(t, err)
	require.Equal(t, strings.NewReplacer("!tt.ptr<bf16>", "!tt.ptr<f8E4M3FN>",
		"tt.dot %xv, %wb, %a : tensor<16x64xbf16> * tensor<64x16xbf16>", "tt.dot %xv, %wv, %a : tensor<16x64xf8E4M3FN> * tensor<64x16xf8E4M3FN>").
		Replace(withoutLines(weightOnly, "%wh = ", "%wf = ", "%wb = ")), fp8)

	_, err = GEMVFP8TTIR(8, 96, 128, Tile{BN: 16, BK: 16, Stages: 1, Dot: true}, dtypes.BFloat16)
	require.ErrorContains(t, err, "at least 32")
	_, err = GEMVFP8TTIR(8, 96, 128, Tile{BN: 16, BK: 64, Stages: 1}, dtypes.BFloat16)
	require.ErrorContains(t, err, "only Dot tiles")
}

// A Dot tile's split K loop: a Dot tile with Split runs Split
// programs per W tile, program pid summing K steps from (pid % Split)·K/Split of W's
// tile pid / Split into float32 partial sums at y + (pid % Split)·m·n.
func TestDotTileSplit(t *testing.T) {
	tile := Tile{BN: 32, BK: 512, Stages: 3, Dot: true, Split: 4}
	require.Equal(t, "dot32x512/s3/k4", tile.String())
	require.Equal(t, 320, tile.Programs(2560))
	require.NoError(t, CheckGEMV(4, 2560, 2048, tile, dtypes.Float32))
	require.ErrorContains(t, CheckGEMV(4, 2560, 2048, tile, dtypes.BFloat16), "float32 partial sums")
	require.ErrorContains(t, CheckGEMV(4, 2560, 1536, tile, dtypes.Float32), "multiple of BK × Split")
	require.ErrorContains(t, CheckGEMV(1, 2560, 2048, Tile{BN: 8, BK: 256, Stages: 3, Split: 2}, dtypes.Float32), "needs a Dot tile")

	requireKernel(t, mustGEMV(t, 4, 2560, 2048, tile, dtypes.Uint8, dtypes.Float32),
		"%pidk = arith.remsi %pid, %cS : i32",
		"%n0 = arith.muli %pidn, %cBN : i32",
		"%cKS = arith.constant 512 : i32",
		"scf.for %k = %kb to %ke step %cBK",
		"%cMN = arith.constant 10240 : i32",
		"%ys = tt.addptr %y, %ys0 : !tt.ptr<f32>, i32",
		"%ybase = tt.splat %ys : !tt.ptr<f32>",
	)
	fp8, err := GEMVFP8TTIR(4, 2560, 2048, tile, dtypes.Float32)
	require.NoError(t, err)
	requireKernel(t, fp8, "scf.for %k = %kb to %ke step %cBK")
}

// A Dot tile of 64 rows splits its K loop as one of DotRows does.
func TestDotTileSplitRows(t *testing.T) {
	tile := Tile{BM: 64, BN: 32, BK: 256, Stages: 3, Dot: true, Split: 4}
	require.NoError(t, CheckGEMV(64, 2560, 2048, tile, dtypes.Float32))
	requireKernel(t, mustGEMV(t, 64, 2560, 2048, tile, dtypes.Uint8, dtypes.Float32),
		"%pidk = arith.remsi %pid, %cS : i32",
		"scf.for %k = %kb to %ke step %cBK",
		"%cMN = arith.constant 163840 : i32",
		"tensor<64x256xbf16> * tensor<256x32xbf16>",
	)
}

// A tile's Warps sets its programs' warps and the accumulators they share.
func TestTileWarps(t *testing.T) {
	tile := Tile{BN: 32, BK: 512, Stages: 3, Dot: true, Warps: 8}
	require.Equal(t, "dot32x512/s3/w8", tile.String())
	require.Equal(t, 2, tile.Accumulators(4))
	tile.Warps = 0
	require.Equal(t, 4, tile.Accumulators(4))
}
