//go:build cgo && !noxla

package diffusion

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// The decoder's programs build as StableHLO on the hlo backend (build-only, so no
// plugin is needed): the prefill and the device loop of every mode, with and without
// sampling, on a fixture model in bfloat16, as on a GPU.
func TestProgramsBuildOnHLO(t *testing.T) {
	m, err := model.Load(hlo.NewBuildOnly(), fixtures.Dir(t, "models", "tiny-minicpm"), model.LoadOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	for name, cfg := range loopConfigs() {
		t.Run(name, func(t *testing.T) {
			d, err := New(m, cfg)
			require.NoError(t, err)
			prefill, err := d.prefillProgram(nil, 2, 128, 2*d.loop.block)
			require.NoError(t, err)
			requireStableHLO(t, prefill, false)
			chunk, err := d.chunkProgram(nil, 2, 128, 7, true)
			require.NoError(t, err)
			requireStableHLO(t, chunk, true)
			// Every output of a chunk is written in place of an input (chunkProgram).
			text, err := hlo.Program(chunk.Graph().Executable())
			require.NoError(t, err)
			outputs := len(chunk.Graph().Executable().Outputs())
			require.Equal(t, outputs, strings.Count(string(text), "tf.aliasing_output"))
			for i := range outputs {
				require.Contains(t, string(text), fmt.Sprintf("tf.aliasing_output = %d : i32", i))
			}
		})
	}
}

// requireStableHLO checks that p was built as a StableHLO module, with a While when
// loop is set.
func requireStableHLO(t *testing.T, p *modelcore.Program, loop bool) {
	t.Helper()
	text, err := hlo.Program(p.Graph().Executable())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(text), "module @"), "not a StableHLO module")
	require.Equal(t, loop, strings.Contains(string(text), "stablehlo.while"), "a While iff the program loops")
}
