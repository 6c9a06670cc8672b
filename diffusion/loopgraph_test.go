package diffusion

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// The device loop of every mode builds a graph XLA compiles (see testutil.RequireLoopGraph).
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
			testutil.RequireLoopGraph(t, p.Graph())
		}
	}
}
