package testutil

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// RequireLoopGraph fails unless a graph with device loops compiles on XLA, which the
// Go backend that tests run on does not check:
//   - no node reads a node of another function: XLA's loop bodies cannot read the
//     enclosing function (the Go backend captures such values silently), and GoMLX's
//     per-graph constant cache can hand a closure a constant made elsewhere;
//   - each kind of reduction (operation and input dtype) appears in one function only:
//     go-xla v0.4.13 builds the reduction's closure once per graph, in the function
//     that first needs it, and refuses to use it from another.
func RequireLoopGraph(tb testing.TB, g *Graph) {
	tb.Helper()
	type reduction struct {
		op    NodeType
		dtype dtypes.DType
	}
	owner := map[reduction]*Function{}
	closures := 0
	for _, n := range g.Nodes() {
		if !n.Function().IsMain() {
			closures++
		}
		for _, in := range n.Inputs() {
			if in.Function() != n.Function() {
				tb.Fatalf("node %s reads %s from another function", n, in)
			}
		}
		if !usesReductionClosure(n.Type()) {
			continue
		}
		key := reduction{n.Type(), n.Inputs()[0].DType()}
		if f, ok := owner[key]; ok && f != n.Function() {
			tb.Fatalf("%s of %s appears in more than one function", key.op, key.dtype)
		}
		owner[key] = n.Function()
	}
	if closures == 0 {
		tb.Fatalf("the graph has no loop")
	}
}

// usesReductionClosure reports the operations whose XLA lowering needs a reduction
// function.
func usesReductionClosure(t NodeType) bool {
	switch t {
	case NodeTypeArgMinMax, NodeTypeReduceWindow, NodeTypeSelectAndScatterMax, NodeTypeSelectAndScatterMin,
		NodeTypeReduceBitwiseAnd, NodeTypeReduceBitwiseOr, NodeTypeReduceBitwiseXor,
		NodeTypeReduceLogicalAnd, NodeTypeReduceLogicalOr, NodeTypeReduceLogicalXor,
		NodeTypeReduceMax, NodeTypeReduceMin, NodeTypeReduceProduct, NodeTypeReduceSum:
		return true
	}
	return false
}
