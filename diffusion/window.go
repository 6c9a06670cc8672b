package diffusion

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// readAt returns x[r, start[r]+i] for i < n: x [b, s], start [b] int32 → [b, n].
// Positions past the end read the last element.
func readAt(x, start *Node, n int) *Node {
	g := x.Graph()
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	pos := MinScalar(Add(InsertAxes(start, -1), Iota(g, shapes.Make(dtypes.Int32, 1, n), 1)), s-1)
	rows := BroadcastToDims(Iota(g, shapes.Make(dtypes.Int32, b, 1), 0), b, n)
	return Gather(x, Stack([]*Node{rows, pos}, -1))
}

// writeAt returns x with x[r, start[r]+i] = values[r, i] wherever write[r, i]:
// x [b, s], start [b] int32, values [b, n], write [b, n] bool (nil: everywhere).
func writeAt(x, start, values, write *Node) *Node {
	g := x.Graph()
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	n := values.Shape().Dimensions[1]
	offset := Sub(Iota(g, shapes.Make(dtypes.Int32, 1, s), 1), InsertAxes(start, -1))    // [b, s]
	hit := Equal(InsertAxes(offset, -1), Iota(g, shapes.Make(dtypes.Int32, 1, 1, n), 2)) // [b, s, n]
	if write != nil {
		hit = LogicalAnd(hit, BroadcastToDims(InsertAxes(write, 1), b, s, n))
	}
	spread := BroadcastToDims(InsertAxes(values, 1), b, s, n)
	picked := ReduceSum(Where(hit, spread, ZerosLike(spread)), -1)
	return Where(ReduceLogicalOr(hit, -1), picked, x)
}

// rowIota returns [1, n] int32 with 0..n-1.
func rowIota(g *Graph, n int) *Node { return Iota(g, shapes.Make(dtypes.Int32, 1, n), 1) }
