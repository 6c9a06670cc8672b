package diffusion

import (
	"slices"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// The early stop of the spec: a revealed stop token in the generated region with no
// masked position before it (in that region) ends generation.
func TestHitsStop(t *testing.T) {
	const stop, other = 2, 9
	l := &loop{block: 4}
	stops := make([]int32, maxStops)
	for i := range stops {
		stops[i] = -1
	}
	stops[0] = stop
	cases := []struct {
		name      string
		tokens    []int32
		masked    []bool
		promptLen int32 // the block starts at 8
		want      bool
	}{
		{"stop after revealed tokens", []int32{other, other, stop, other}, []bool{false, false, false, true}, 8, true},
		{"mask before the stop", []int32{other, 0, stop, other}, []bool{false, true, false, false}, 8, false},
		{"stop is the anchor", []int32{stop, 0, 0, 0}, []bool{false, true, true, true}, 8, true},
		{"stop in the prompt", []int32{stop, other, other, 0}, []bool{false, false, false, true}, 11, false},
		{"stop in the prompt, mask after it", []int32{stop, other, 0, stop}, []bool{false, false, true, false}, 10, false},
		{"no stop", []int32{other, other, other, other}, []bool{false, false, false, false}, 8, false},
	}
	b := testutil.Backend(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ExecOnce(b, func(g *Graph) *Node {
				p := params{promptLen: Const(g, []int32{c.promptLen}), stops: Const(g, stops)}
				return l.hitsStop(p, Const(g, [][]int32{c.tokens}), Const(g, [][]bool{c.masked}), Const(g, []int32{8}))
			})
			require.NoError(t, err)
			require.Equal(t, []bool{c.want}, got.Value())
		})
	}
}

// The While's condition counts waiting rows without a reduction (see anyTrue).
func TestAnyTrue(t *testing.T) {
	b := testutil.Backend(t)
	for _, rows := range [][]bool{{false}, {true}, {false, false, false}, {false, true, false}, {true, true}} {
		got, err := ExecOnce(b, func(g *Graph) *Node { return anyTrue(Const(g, rows)) })
		require.NoError(t, err)
		require.Equal(t, slices.Contains(rows, true), got.Value(), "%v", rows)
	}
}
