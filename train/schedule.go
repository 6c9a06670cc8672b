package train

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// Schedule is the learning rate by step: a linear warmup to Peak, then a cosine decay to
// Min at step Total, Min after.
type Schedule struct {
	Peak, Min float64
	// Warmup is the number of warmup steps: step s < Warmup (counted from 0) has
	// Peak·(s+1)/Warmup.
	Warmup int
	// Total is the step at which the decay reaches Min, normally the run's length.
	Total int
}

// LR returns the learning rate of step (counted from 0).
func (s Schedule) LR(step int) float64 {
	if step < s.Warmup {
		return s.Peak * float64(step+1) / float64(s.Warmup)
	}
	progress := 1.0
	if s.Total > s.Warmup {
		progress = math.Min(1, float64(step-s.Warmup)/float64(s.Total-s.Warmup))
	}
	return s.Min + 0.5*(s.Peak-s.Min)*(1+math.Cos(math.Pi*progress))
}

// node computes LR in float32 in the graph, from step, an int32 scalar.
func (s Schedule) node(step *Node) *Node {
	g := step.Graph()
	f := ConvertDType(step, dtypes.Float32)
	c := func(v float64) *Node { return Const(g, float32(v)) }
	warm := Mul(c(s.Peak/float64(max(s.Warmup, 1))), Add(f, c(1)))
	progress := c(1)
	if s.Total > s.Warmup {
		progress = Min(c(1), Div(Sub(f, c(float64(s.Warmup))), c(float64(s.Total-s.Warmup))))
	}
	decay := Add(c(s.Min), Mul(c(0.5*(s.Peak-s.Min)), Add(c(1), Cos(Mul(c(math.Pi), progress)))))
	return Where(LessThan(f, c(float64(s.Warmup))), warm, decay)
}
