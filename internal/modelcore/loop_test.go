package modelcore

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// A loop over forward passes built with Weights.While builds a graph XLA compiles
// (see testutil.RequireLoopGraph).
func TestWhileIsSelfContained(t *testing.T) {
	m := randomModel(t, tinyConfig(), 1)
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, 4)}
	for range 2 * m.Config.NumLayers {
		inputs = append(inputs, m.CacheShape(1, 16))
	}
	p, err := m.Compile("loop", inputs, func(w *Weights, in []*Node) []*Node {
		init := append([]*Node{Const(in[0].Graph(), int32(0))}, in...)
		cond := func(_ *Weights, st, _ []*Node) []*Node {
			return []*Node{LessThan(st[0], Const(st[0].Graph(), int32(3)))}
		}
		body := func(w *Weights, st, _ []*Node) []*Node {
			g := st[0].Graph()
			start := Const(g, []int32{4})
			logits, cache := m.Forward(w, Window{Tokens: st[1], Start: start, CacheLen: start,
				WriteLen: Const(g, []int32{4}), BlockSize: 4}, CacheNodesFrom(st[2:]), nil)
			next := ConvertDType(ArgMax(logits, -1), dtypes.Int32)
			return append([]*Node{Add(st[0], Const(g, int32(1))), next}, cache.Nodes()...)
		}
		return w.While(init, nil, cond, body)[:2]
	})
	require.NoError(t, err)
	testutil.RequireLoopGraph(t, p.Graph())
}
