//go:build cgo && !noxla

package hlo

import (
	"math/bits"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	xshapes "github.com/gomlx/go-xla/types/shapes"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// maxGEMVRows is the most rows (M) a product of bfloat16 weights (or of a W8A8 layer)
// may have to run as our Triton GEMV: the fused step's 8 (fused mode's forward at batch
// 1), the 4-token denoise step's and the AR step's, padded to 4 rows
// (backend.MinWindow).
const maxGEMVRows = 8

// fp8RowTile and fp8DotTile are the tiles of FP8 products of 1 and of 2 to DotRows rows:
// the fastest of those swept on the H200 with the MiniCPM5-2B shape. The Dot tile converts
// the bytes to bfloat16 in registers for the tensor cores, its K loop split (splitK).
var (
	fp8RowTile = triton.Tile{BN: 8, BK: 1024, Stages: 3}
	fp8DotTile = triton.Tile{BN: 128, BK: 128, Stages: 3, Warps: 4, Dot: true}
)

// w8a8DotTile is the Dot tile of W8A8 products (w8a8Tile), the fastest of those swept on
// the H200 for the denoise and fused steps.
var w8a8DotTile = triton.Tile{BN: 128, BK: 128, Stages: 3, Warps: 8, Dot: true}

// maxFP8RowsTileRows is the most rows an FP8 product runs as our GEMV with gemvTiles'
// tile, where fp8DotTile does not divide W: at 8 rows it lost to XLA's.
const maxFP8RowsTileRows = 4

// maxFP8Rows is the most rows an FP8 product runs as our GEMV on the bytes; past it,
// XLA's GEMM, reading them converted as f8E4M3FN values (fp8BytesProduct), was as fast
// or faster.
const maxFP8Rows = 32

// fp8ManyRowsTile is the Dot tile of FP8 products of more than DotRows rows, up to
// maxFP8Rows, its BM their rows rounded up to a power of two, its K loop split as
// fp8DotTile's is: the fastest swept for fused decoding at batch 8.
var fp8ManyRowsTile = triton.Tile{BN: 64, BK: 256, Stages: 3, Warps: 8, Dot: true}

// fp8Tile is the tile of the GEMV of m rows of FP8 bytes W [n, k], if it has one. A
// GEMV reading the bytes beats XLA's product, which reads the decoded weight written
// out by a kernel of its own: at one row with fp8RowTile, at 2 to DotRows rows with
// fp8DotTile, up to maxFP8Rows with fp8ManyRowsTile (both fitted to W, fitDotTile, and
// with their K loop split, splitK), each where it divides W (as measured: pipelined
// over its stages even where the K loop is shorter), else with gemvTile's up to
// maxFP8RowsTileRows.
func fp8Tile(m, n, k int) (triton.Tile, bool) {
	t := fp8DotTile
	switch {
	case m == 1:
		t = fp8RowTile
	case m > maxFP8Rows:
		return triton.Tile{}, false
	case m > triton.DotRows:
		t = fp8ManyRowsTile
		t.BM = 1 << bits.Len(uint(m-1))
	}
	if t.Dot {
		t = fitDotTile(t, n, k)
	}
	if triton.CheckGEMV(m, n, k, t, dtypes.BFloat16) == nil {
		if m > 1 {
			t = splitK(t, m, n, k)
		}
		return t, true
	}
	if m <= maxFP8RowsTileRows {
		return gemvTile(m, n, k)
	}
	return triton.Tile{}, false
}

// fitDotTile returns Dot tile t with its K step and then its W rows halved until they
// divide W [n, k], down to 32 and 16, so that shapes the measured tiles do not divide
// (MiniCPM-2B's down projection) keep our kernel on the bytes.
func fitDotTile(t triton.Tile, n, k int) triton.Tile {
	for t.BK > 32 && k%t.BK != 0 {
		t.BK /= 2
	}
	for t.BN > 16 && n%t.BN != 0 {
		t.BN /= 2
	}
	return t
}

// minGEMVStep is the smallest K step of a GEMV tile: 16 bf16, 32 bytes of each row of W.
const minGEMVStep = 16

// gemvPolicy says which dense bfloat16 products run our Triton GEMV (option "triton").
type gemvPolicy int

const (
	gemvNone        gemvPolicy = iota // none: every product is a stablehlo.dot_general
	gemvWhereFaster                   // our GEMV where measured faster (defaultKernels) (lowersWhereFaster)
	gemvAll                           // every product gemvTile has a tile for
)

// minFasterGEMVWeight is the fewest entries of W for which the 1-row GEMV beat XLA's dot
// on the H200 (MiniCPM5-2B's gate/up, down and head did; qkv and o, 5 and 4 Mi entries,
// did not). With more rows XLA's dot was as fast or faster for every shape.
const minFasterGEMVWeight = 8 << 20

// lowersWhereFaster reports whether the GEMV of m rows of W [n, k] is one measured
// faster than XLA's dot.
func lowersWhereFaster(m, n, k int) bool { return m == 1 && n*k >= minFasterGEMVWeight }

// gemvTiles is the Triton GEMV tile per row count: the fastest of those timed on the H200
// for most of MiniCPM5-2B's weights, all pipelined over 3 stages. 16×64 at 5-8 rows keeps
// the rows within triton.MaxAccumulators.
var gemvTiles = [maxGEMVRows + 1]triton.Tile{
	1: {BN: 8, BK: 512, Stages: 3},
	2: {BN: 8, BK: 256, Stages: 3},
	3: {BN: 8, BK: 256, Stages: 3},
	4: {BN: 8, BK: 256, Stages: 3},
	5: {BN: 16, BK: 64, Stages: 3},
	6: {BN: 16, BK: 64, Stages: 3},
	7: {BN: 16, BK: 64, Stages: 3},
	8: {BN: 16, BK: 64, Stages: 3},
}

// gemvTile is the tile of the GEMV of m rows of W [n, k], if there is one: gemvTiles'
// for m, its K step halved until it divides k (small models; at least minGEMVStep),
// its pipelining dropped when the K loop is shorter than its stages. There is none when
// m is out of the table or no K step or BN divides W.
func gemvTile(m, n, k int) (triton.Tile, bool) {
	if m < 1 || m > maxGEMVRows {
		return triton.Tile{}, false
	}
	t := gemvTiles[m]
	for t.BK >= minGEMVStep && k%t.BK != 0 {
		t.BK /= 2
	}
	if t.BK < minGEMVStep {
		return triton.Tile{}, false
	}
	if k/t.BK < t.Stages {
		t.Stages = 1
	}
	return t, triton.CheckGEMV(m, n, k, t, dtypes.BFloat16) == nil
}

// gemvOutput is the output dtype of a product lowered to the GEMV, as DotGeneral's
// config gives it, and whether the GEMV computes it: float32 accumulation (asked for or
// not; bfloat16 accumulation is not lowered) and a bfloat16 or float32 output.
func gemvOutput(config compute.DotGeneralConfig) (dtypes.DType, bool) {
	out := dtypes.BFloat16
	switch config.AccumulatorDType {
	case dtypes.InvalidDType:
	case dtypes.Float32:
		out = dtypes.Float32
	default:
		return dtypes.InvalidDType, false
	}
	if config.OutputDType != dtypes.InvalidDType {
		out = config.OutputDType
	}
	return out, out == dtypes.BFloat16 || out == dtypes.Float32
}

// tritonGEMV returns lhs·rhsᵀ computed by our Triton GEMV when the backend's option
// tritonGEMV lowers the product (gemvWhereFaster: only where lowersWhereFaster, or for FP8
// bytes wherever fp8Tile or w8a8Tile has a tile; gemvAll: always) and it is a
// dense layer of a few rows: lhs [..., K] bfloat16 and rhs [N, K] bfloat16, or uint8
// holding FP8 E4M3FN bytes (the weight that e4m3Bytes found decoded), or both uint8
// (a W8A8 layer's input bytes and its weight's), contracting lhs's last axis with rhs's
// axis 1, no batch axes, M (the product of lhs's other dimensions) from 1 to 8 (to
// maxFP8Rows for FP8 bytes), a tile of gemvTile (of fp8Tile for FP8 bytes, of w8a8Tile
// for both; for bfloat16 W that no tile divides, a tile of the rows one divides, the
// rest XLA's: raggedGEMV), and an output dtype of gemvOutput. lhs is reshaped to [M, K]
// and the [M, N] result to [..., N]. ok is false, with no op added, for every other
// product; err is set (with ok true) only if building the lowered product failed.
func (f *Function) tritonGEMV(lhs *stablehlo.Value, lhsContractingAxes, lhsBatchAxes []int,
	rhs *stablehlo.Value, rhsContractingAxes, rhsBatchAxes []int,
	config compute.DotGeneralConfig) (v *stablehlo.Value, ok bool, err error) {
	ls, rs := lhs.Shape(), rhs.Shape()
	if f.builder.backend.tritonGEMV == gemvNone || len(lhsBatchAxes) != 0 || len(rhsBatchAxes) != 0 || ls.Rank() < 1 || rs.Rank() != 2 ||
		!slices.Equal(lhsContractingAxes, []int{ls.Rank() - 1}) || !slices.Equal(rhsContractingAxes, []int{1}) {
		return nil, false, nil
	}
	out, ok := gemvOutput(config)
	if !ok {
		return nil, false, nil
	}
	rows := ls.Dimensions[:ls.Rank()-1]
	m, k, n := 1, rs.Dimensions[1], rs.Dimensions[0]
	for _, d := range rows {
		m *= d
	}
	var t triton.Tile
	switch {
	case ls.DType == dtypes.Uint8 && rs.DType == dtypes.Uint8:
		t, ok = w8a8Tile(m, n, k)
	case ls.DType != dtypes.BFloat16:
		return nil, false, nil
	case rs.DType == dtypes.Uint8:
		t, ok = fp8Tile(m, n, k)
	case rs.DType != dtypes.BFloat16 || (f.builder.backend.tritonGEMV == gemvWhereFaster && !lowersWhereFaster(m, n, k)):
		return nil, false, nil
	default:
		t, ok = gemvTile(m, n, k)
	}
	// ragged is, where no tile divides a bfloat16 W, the rows of W a tile does divide
	// (the rest go to XLA's dot: raggedGEMV).
	ragged := 0
	if !ok && m <= maxGEMVRows && ls.DType == dtypes.BFloat16 && rs.DType == dtypes.BFloat16 {
		if ragged = n - n%gemvTiles[m].BN; ragged > 0 {
			t, ok = gemvTile(m, ragged, k)
		}
	}
	if !ok {
		return nil, false, nil
	}
	x := lhs
	if ls.Rank() != 2 {
		if x, err = stablehlo.Reshape(lhs, xshapes.Make(ls.DType, m, k)); err != nil {
			return nil, true, err
		}
	}
	var y *stablehlo.Value
	if ragged > 0 {
		y, err = f.raggedGEMV(x, rhs, ragged, t, out)
	} else {
		y, err = f.splitProduct(t, out, func(out dtypes.DType) (*stablehlo.Value, error) {
			return f.builder.backend.kernels().GEMV(x, rhs, t, out)
		})
	}
	if err == nil && ls.Rank() != 2 {
		y, err = stablehlo.Reshape(y, xshapes.Make(out, append(slices.Clone(rows), n)...))
	}
	return y, true, err
}

// w8a8Tile is the tile of a product of m rows of FP8 bytes by W [n, k] of FP8 bytes on
// the tensor cores as FP8: w8a8DotTile from 2 to maxGEMVRows rows, its K loop split
// (splitK), where it divides W; faster than the weight-only kernels on the decoded input.
// Other products take the weight-only kernels, at one row the row tile's.
func w8a8Tile(m, n, k int) (triton.Tile, bool) {
	if m < 2 || m > maxGEMVRows || triton.CheckGEMVFP8(m, n, k, w8a8DotTile, dtypes.Float32) != nil {
		return triton.Tile{}, false
	}
	return splitK(w8a8DotTile, m, n, k), true
}

// splitProduct returns y of dtype out from product, a GEMV kernel of tile t: with
// t.Split, of its float32 partial sums [Split, m, n], added up (a reduction that XLA
// fuses into y's consumer) and converted to out.
func (f *Function) splitProduct(t triton.Tile, out dtypes.DType, product func(out dtypes.DType) (*stablehlo.Value, error)) (*stablehlo.Value, error) {
	if t.Split <= 1 {
		return product(out)
	}
	partials, err := product(dtypes.Float32)
	if err != nil {
		return nil, err
	}
	zero, err := f.scalar(dtypes.Float32, 0)
	if err != nil {
		return nil, err
	}
	add, err := f.combiner(dtypes.Float32, stablehlo.Add)
	if err != nil {
		return nil, err
	}
	y, err := stablehlo.Reduce(partials, zero, add, 0)
	if err != nil || out == dtypes.Float32 {
		return y, err
	}
	return stablehlo.Convert(y, out)
}

// minSplitPrograms is the programs splitK asks of a GEMV: about two per SM of the H200's
// 132. 256 rather than 264 splits MiniCPM5-2B's down projection 8 ways, not 12, which was
// faster for FP8 and W8A8 products.
const minSplitPrograms = 256

// splitK returns Dot tile t with its K loop split over the fewest programs per W tile
// that give minSplitPrograms in all (a divisor of K's steps, the most of them where none
// gives as many), each program summing its share of K into float32 partial sums that
// splitProduct adds up; t itself where W [n, k] has as many tiles already or K is one
// step. FP8 products of few W tiles otherwise leave most SMs idle (split, their steps
// took 0.84-0.89× the time).
func splitK(t triton.Tile, m, n, k int) triton.Tile {
	tiles, steps := n/t.BN, k/t.BK
	split := 1
	for d := 2; d <= steps && tiles*split < minSplitPrograms; d++ {
		if steps%d == 0 {
			split = d
		}
	}
	s := t
	s.Split = split
	if split < 2 || triton.CheckGEMV(m, n, k, s, dtypes.Float32) != nil {
		return t
	}
	return s
}

// raggedGEMV returns x [m, k] · Wᵀ [m, n] of dtype out for W = rhs [n, k] that no GEMV
// tile divides (MiniCPM-2B's head: 122753 rows, odd): its first rows rows by our GEMV of
// tile t, reading W in place, the rest by XLA's dot of their slice (xlaDot, summed in
// float32 as the GEMV sums), concatenated: slightly faster than XLA's dot over all of them.
func (f *Function) raggedGEMV(x, rhs *stablehlo.Value, rows int, t triton.Tile, out dtypes.DType) (*stablehlo.Value, error) {
	n, k := rhs.Shape().Dimensions[0], rhs.Shape().Dimensions[1]
	head, err := f.builder.backend.kernels().GEMVOfRows(x, rhs, rows, t, out)
	if err != nil {
		return nil, err
	}
	rest, err := stablehlo.Slice(rhs, []int{rows, 0}, []int{n, k}, []int{1, 1})
	if err != nil {
		return nil, err
	}
	tail, err := f.xlaDot([]*stablehlo.Value{x, rest}, []int{1}, nil, []int{1}, nil,
		compute.DotGeneralConfig{AccumulatorDType: dtypes.Float32, OutputDType: out}, false)
	if err != nil {
		return nil, err
	}
	return stablehlo.Concatenate(1, head, tail)
}
