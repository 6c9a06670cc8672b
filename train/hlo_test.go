//go:build cgo && !noxla

package train

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/model"
)

// The step programs build as StableHLO on our backend (build-only, so no plugin is
// needed), in bfloat16 as on a GPU: the autoregressive step and the conversion's, whose
// graphs carry no kernel marks for the backend to act on.
func TestStepBuildsOnHLO(t *testing.T) {
	m, err := model.Load(hlo.NewBuildOnly(), fixtures.Dir(t, "models", "tiny-llama"), model.LoadOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	data := &Tokens{Vocab: m.Config.VocabSize}
	for i := range 512 {
		data.IDs = append(data.IDs, uint16(i%(m.Config.VocabSize-1)))
	}
	o := DefaultBlockDiffusion(m.Config.MaskTokenID)
	for name, cfg := range map[string]Config{
		"ar":      {},
		"convert": {FrozenBase: true, Objective: o.Objective(Curriculum{LargeBlock: 8, LargeUntil: 2, Block: 4})},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Batch, cfg.SeqLen, cfg.BOS = 2, 32, m.Config.BOSTokenID
			cfg.Schedule = Schedule{Peak: 1e-3, Total: 10}
			tr, err := New(m, data, cfg)
			require.NoError(t, err)
			text, err := hlo.Program(tr.prog.g.Executable())
			require.NoError(t, err)
			require.Contains(t, string(text), "stablehlo.dot_general")
			require.NotContains(t, string(text), "triton", "a training step runs no kernels of ours")
		})
	}
}
