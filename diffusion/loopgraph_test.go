package diffusion

import (
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"
)

// requireSelfContained fails if a node reads a node of another function. XLA's loop
// bodies cannot read the enclosing function (the Go backend, which tests run on,
// would capture such values silently), and GoMLX's per-graph constant cache can hand a
// closure a constant made elsewhere.
func requireSelfContained(t *testing.T, g *Graph) {
	t.Helper()
	closures := 0
	for _, n := range g.Nodes() {
		if !n.Function().IsMain() {
			closures++
		}
		for _, in := range n.Inputs() {
			require.Same(t, n.Function(), in.Function(), "node %s reads %s from another function", n, in)
		}
	}
	require.Positive(t, closures, "the graph has no loop")
}

// The device loop of every mode compiles into self-contained functions.
func TestLoopGraphIsSelfContained(t *testing.T) {
	m := tinyModel(t)
	for _, mode := range []Mode{Fused, Reference, Autoregressive} {
		for _, sampling := range []bool{false, true} {
			cfg := Quality
			cfg.Mode = mode
			if sampling {
				cfg.Temperature, cfg.TopK, cfg.TopP = 1, 10, 0.9
			}
			d, err := New(m, cfg)
			require.NoError(t, err)
			p, err := d.chunkProgram(2, 256, 7, true)
			require.NoError(t, err, "%s sampling=%t", mode, sampling)
			requireSelfContained(t, p.Graph())
		}
	}
}
