package diffusion

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// loopConfigs are the decoder configurations whose device loops differ: every mode,
// greedy and sampling (temperature, top-k and top-p), named "mode/sampling=bool".
func loopConfigs() map[string]Config {
	configs := map[string]Config{}
	for _, mode := range []Mode{Fused, Reference, Autoregressive} {
		for _, sampling := range []bool{false, true} {
			cfg := Quality
			cfg.Mode = mode
			if sampling {
				cfg.Temperature, cfg.TopK, cfg.TopP = 1, 10, 0.9
			}
			configs[fmt.Sprintf("%s/sampling=%t", mode, sampling)] = cfg
		}
	}
	return configs
}

// The device loop of every mode builds a graph XLA compiles (see testutil.RequireLoopGraph).
func TestLoopGraphIsSelfContained(t *testing.T) {
	m := tinyModel(t)
	for name, cfg := range loopConfigs() {
		d, err := New(m, cfg)
		require.NoError(t, err)
		p, err := d.chunkProgram(nil, 2, 256, 7, true)
		require.NoError(t, err, name)
		testutil.RequireLoopGraph(t, p.Graph())
	}
}
