package kernels_test

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/require"

	. "github.com/blockdiff/blockdiff/internal/kernels" //nolint:revive
	"github.com/blockdiff/blockdiff/internal/testutil"
)

// notAnOp is an Op of no type of this package.
type notAnOp struct{}

func (notAnOp) Name() string { return "notAnOp" }

// Values lists each operation's values in its fields' order, and rejects other types.
func TestValues(t *testing.T) {
	for op, n := range map[Op]int{NormedDense{}: 4, NormalisedRow{}: 3, FP8Dense{}: 3, E4M3Decoded{}: 2,
		ResidualAdd{}: 2, SwiGLU{}: 2, WindowQKV{}: 6, TokenInCache{}: 5, WindowInCache{}: 4} {
		vs, err := Values(op)
		require.NoError(t, err, op.Name())
		require.Len(t, vs, n, op.Name())
	}
	_, err := Values(notAnOp{})
	require.ErrorContains(t, err, "not an operation of this package")
}

// A backend that runs none of the operations (the Go backend) ignores marks, so the
// graph is the decomposition alone.
func TestMarkIgnoredElsewhere(t *testing.T) {
	g := graph.NewGraph(testutil.Backend(t), t.Name())
	defer g.Finalize()
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 2, 3))
	y := graph.Add(x, x)
	n := len(g.Nodes())
	Mark(g, ResidualAdd{Residual: Value(x), Product: Value(y)})
	require.Len(t, g.Nodes(), n)
	require.Nil(t, Value(nil))
}
