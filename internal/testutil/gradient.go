package testutil

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"
)

// GradientCheck compares a scalar loss's gradient, as graph.Gradient computes it, with
// central finite differences.
type GradientCheck struct {
	// Names and Shapes describe the parameters the loss is differentiated against.
	Names  []string
	Shapes []shapes.Shape
	// Loss builds the scalar float32 loss from the parameters' nodes.
	Loss func(g *Graph, params []*Node) *Node
	// Eps is the finite-difference step; RelTol and AbsTol bound |numeric − analytic| by
	// RelTol·|numeric| + AbsTol.
	Eps, RelTol, AbsTol float64
}

// Run checks, for each parameter, the coordinate of its largest gradient and one drawn
// from rng, at values (one flat slice per parameter, restored afterwards), and returns
// how many coordinates it checked. The finite differences at Eps and Eps/2 are combined
// (Richardson), so that their O(Eps²) error cancels.
func (c GradientCheck) Run(t *testing.T, b compute.Backend, values [][]float32, rng *rand.Rand) int {
	t.Helper()
	build := func(withGrad bool) *Graph {
		g := NewGraph(b, "gradient_check")
		nodes := make([]*Node, len(c.Shapes))
		for i, s := range c.Shapes {
			nodes[i] = Parameter(g, c.Names[i], s)
		}
		loss := c.Loss(g, nodes)
		outs := []*Node{loss}
		if withGrad {
			outs = append(outs, Gradient(loss, nodes...)...)
		}
		require.NoError(t, g.Compile(outs...))
		return g
	}
	run := func(g *Graph) []*tensors.Tensor {
		in := make([]any, len(values))
		for i, v := range values {
			in[i] = tensors.FromFlatDataAndDimensions(v, c.Shapes[i].Dimensions...)
		}
		return g.Run(in...)
	}
	gradGraph, lossGraph := build(true), build(false)
	defer gradGraph.Finalize()
	defer lossGraph.Finalize()
	out := run(gradGraph)
	checked := 0
	for i, name := range c.Names {
		grad := tensors.MustCopyFlatData[float32](out[1+i])
		largest := 0
		for j := range grad {
			if math.Abs(float64(grad[j])) > math.Abs(float64(grad[largest])) {
				largest = j
			}
		}
		for _, j := range []int{largest, rng.IntN(len(grad))} {
			diff := func(h float32) float64 {
				orig := values[i][j]
				values[i][j] = orig + h
				plus := tensors.MustCopyFlatData[float32](run(lossGraph)[0])[0]
				values[i][j] = orig - h
				minus := tensors.MustCopyFlatData[float32](run(lossGraph)[0])[0]
				values[i][j] = orig
				return (float64(plus) - float64(minus)) / (2 * float64(h))
			}
			numeric := (4*diff(float32(c.Eps/2)) - diff(float32(c.Eps))) / 3
			require.InDelta(t, numeric, float64(grad[j]), c.RelTol*math.Abs(numeric)+c.AbsTol, "%s[%d]", name, j)
			checked++
		}
	}
	return checked
}
