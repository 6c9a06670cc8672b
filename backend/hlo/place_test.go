//go:build cgo && !noxla

package hlo_test

import (
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/internal/kernels"
)

// With option triton=place our attention kernel takes a one-token window's key and
// value from the qkv rows where the keys and values attended are the cache with the
// window's (kernels.TokenInCache) of its named attention inputs (kernels.WindowQKV). It
// writes them into the cache where the cache's update is the same placement for rows
// with n > 0. A value other than the named one, or an update at another start, is left
// to XLA, and so are placements the graph does not name.
func TestTritonPlaceTokens(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=attention,triton=rope,triton=place")
	require.NoError(t, err)
	f32, bf16, i32 := dtypes.Float32, dtypes.BFloat16, dtypes.Int32
	const heads, kvHeads, d, slots = 4, 2, 16, 64
	cache := shapes.Make(bf16, 1, kvHeads, slots, d)
	inputs := []shapes.Shape{
		shapes.Make(f32, 1, 1, (heads+2*kvHeads)*d),              // the fused product's rows
		shapes.Make(f32, 1, 1, d/2), shapes.Make(f32, 1, 1, d/2), // cos, sin
		cache, cache, // k, v
		shapes.Make(i32, 1), shapes.Make(i32, 1), shapes.Make(i32, 1), // start, n, another start
		shapes.Make(bf16, 1, 1, 1, slots), // bias
	}
	// place is model's tokenInCache: the token x [1, 1, kvHeads, d] in slot start of
	// the cache, in the rows where n > 0 unless n is nil, named where mark is set.
	place := func(cache, x, start, n *Node, mark bool) *Node {
		g := x.Graph()
		at := Equal(Iota(g, shapes.Make(i32, 1, slots), 1), InsertAxes(start, -1))
		if n != nil {
			at = LogicalAnd(at, GreaterThan(InsertAxes(n, -1), Const(g, int32(0))))
		}
		at = BroadcastToDims(Reshape(at, 1, 1, slots, 1), 1, kvHeads, slots, d)
		placed := Where(at, BroadcastToDims(TransposeAllAxes(x, 0, 2, 1, 3), 1, kvHeads, slots, d), cache)
		if mark {
			kernels.Mark(g, kernels.TokenInCache{Result: kernels.Value(placed), Cache: kernels.Value(cache),
				Token: kernels.Value(x), Start: kernels.Value(start), Written: kernels.Value(n)})
		}
		return placed
	}
	// placing builds the window with the value from column valueColumn of the rows and
	// the cache written at start writeStart, and returns how many of our attention
	// kernels place the token and how many also write it.
	placing := func(valueColumn, writeStart int, mark bool) (places, writes int) {
		text := buildOn(t, b, inputs, func(g *Graph, in []*Node) []*Node {
			qkv := ConvertDType(in[0], bf16)
			qk := rotateHalves(Reshape(SliceAxis(qkv, -1, AxisRange(0, (heads+kvHeads)*d)), 1, 1, heads+kvHeads, d),
				InsertAxes(in[1], 2), InsertAxes(in[2], 2), modelHalves)
			named := Reshape(SliceAxis(qkv, -1, AxisRange((heads+kvHeads)*d, (heads+2*kvHeads)*d)), 1, 1, kvHeads, d)
			v := named
			if valueColumn != (heads+kvHeads)*d {
				v = Reshape(SliceAxis(qkv, -1, AxisRange(valueColumn, valueColumn+kvHeads*d)), 1, 1, kvHeads, d)
			}
			k := SliceAxis(qk, 2, AxisRange(heads, heads+kvHeads))
			written := []*Node{place(in[3], k, in[writeStart], in[6], mark), place(in[4], v, in[writeStart], in[6], mark)}
			q := TransposeAllAxes(SliceAxis(qk, 2, AxisRange(0, heads)), 0, 2, 1, 3)
			kernels.Mark(g, kernels.WindowQKV{Rows: kernels.Value(qkv), Query: kernels.Value(q), Keys: kernels.Value(k),
				Values: kernels.Value(named), Cos: kernels.Value(in[1]), Sin: kernels.Value(in[2])})
			bias := InternalBackendOutputs(in[8])[0]
			out, _ := BackendFusedScaledDotProductAttention(q, place(in[3], k, in[5], nil, mark), place(in[4], v, in[5], nil, mark),
				compute.AttentionAxesLayoutBHSD, &compute.ScaledDotProductAttentionConfig{Scale: 0.25, Bias: bias})
			return append([]*Node{out, named}, written...)
		})
		require.Equal(t, 1, tritonCallsWith(text, "tt.func public @attention(%x: !tt.ptr<f32>"), "the queries are rotated")
		return tritonCallsWith(text, "%start: !tt.ptr<i32>"), tritonCallsWith(text, "%written: !tt.ptr<i32>")
	}
	places, writes := placing((heads+kvHeads)*d, 5, true)
	require.Equal(t, [2]int{1, 1}, [2]int{places, writes}, "model's placement, written")
	places, _ = placing((heads+kvHeads)*d-d, 5, true)
	require.Zero(t, places, "a value other than the named one")
	places, writes = placing((heads+kvHeads)*d, 7, true)
	require.Equal(t, [2]int{1, 0}, [2]int{places, writes}, "written at another start")
	places, _ = placing((heads+kvHeads)*d, 5, false)
	require.Zero(t, places, "placements not named")
}

// A window of 4 at batch 1 placed in its slots by a dynamic update (model's
// windowInCache) has its keys and values taken from the qkv rows where it writes
// nothing; a value other than the named one, or a second update of the cache with the
// same keys (the window's write, which reads them anyway), leaves the placement to XLA.
func TestTritonPlaceWindows(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=attention,triton=rope,triton=place")
	require.NoError(t, err)
	f32, bf16, i32 := dtypes.Float32, dtypes.BFloat16, dtypes.Int32
	const heads, kvHeads, d, slots, w = 4, 2, 16, 64, 4
	cache := shapes.Make(bf16, 1, kvHeads, slots, d)
	inputs := []shapes.Shape{
		shapes.Make(f32, 1, w, (heads+2*kvHeads)*d),              // the fused product's rows
		shapes.Make(f32, 1, w, d/2), shapes.Make(f32, 1, w, d/2), // cos, sin
		cache, cache, shapes.Make(i32, 1), // k, v, start
		shapes.Make(bf16, 1, 1, w, slots), // bias
	}
	// slotsOf is model's windowInCache: the window x [1, w, kvHeads, d] in slots start on.
	slotsOf := func(cache, x, start *Node) *Node {
		zero := ScalarZero(x.Graph(), i32)
		placed := DynamicUpdateSlice(cache, TransposeAllAxes(x, 0, 2, 1, 3), []*Node{zero, zero, Reshape(start), zero})
		kernels.Mark(x.Graph(), kernels.WindowInCache{Result: kernels.Value(placed), Cache: kernels.Value(cache),
			Window: kernels.Value(x), Start: kernels.Value(start)})
		return placed
	}
	placed := func(valueColumn int, writes bool) int {
		text := buildOn(t, b, inputs, func(g *Graph, in []*Node) []*Node {
			qkv := ConvertDType(in[0], bf16)
			qk := rotateHalves(Reshape(SliceAxis(qkv, -1, AxisRange(0, (heads+kvHeads)*d)), 1, w, heads+kvHeads, d),
				InsertAxes(in[1], 2), InsertAxes(in[2], 2), modelHalves)
			named := Reshape(SliceAxis(qkv, -1, AxisRange((heads+kvHeads)*d, (heads+2*kvHeads)*d)), 1, w, kvHeads, d)
			v := named
			if valueColumn != (heads+kvHeads)*d {
				v = Reshape(SliceAxis(qkv, -1, AxisRange(valueColumn, valueColumn+kvHeads*d)), 1, w, kvHeads, d)
			}
			k := SliceAxis(qk, 2, AxisRange(heads, heads+kvHeads))
			outs := []*Node{named}
			if writes {
				outs = append(outs, slotsOf(in[3], k, in[5]), slotsOf(in[4], v, in[5]))
			}
			q := TransposeAllAxes(SliceAxis(qk, 2, AxisRange(0, heads)), 0, 2, 1, 3)
			kernels.Mark(g, kernels.WindowQKV{Rows: kernels.Value(qkv), Query: kernels.Value(q), Keys: kernels.Value(k),
				Values: kernels.Value(named), Cos: kernels.Value(in[1]), Sin: kernels.Value(in[2])})
			bias := InternalBackendOutputs(in[6])[0]
			out, _ := BackendFusedScaledDotProductAttention(q, slotsOf(in[3], k, in[5]), slotsOf(in[4], v, in[5]),
				compute.AttentionAxesLayoutBHSD, &compute.ScaledDotProductAttentionConfig{Scale: 0.25, Bias: bias})
			return append([]*Node{out}, outs...)
		})
		return tritonCallsWith(text, "%start: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %oacc")
	}
	require.Equal(t, 1, placed((heads+kvHeads)*d, false), "model's placement")
	require.Zero(t, placed((heads+kvHeads)*d-d, false), "a value other than the named one")
	require.Zero(t, placed((heads+kvHeads)*d, true), "a window that writes")
}
