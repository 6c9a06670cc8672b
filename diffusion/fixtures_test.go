package diffusion

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

type decodeCase struct {
	Prompt            []int   `json:"prompt"`
	BlockSize         int     `json:"block_size"`
	Threshold         float64 `json:"threshold"`
	MinReveal         int     `json:"min_reveal"`
	MaxNewTokens      int     `json:"max_new_tokens"`
	StopTokenIDs      []int   `json:"stop_token_ids"`
	MaskTokenID       int     `json:"mask_token_id"`
	Tokens            []int   `json:"tokens"`
	Finish            Finish  `json:"finish"`
	ReferenceForwards int     `json:"reference_forwards"`
	Steps             []struct {
		BlockStart int      `json:"block_start"`
		Revealed   [][2]int `json:"revealed"`
	} `json:"steps"`
}

type arCase struct {
	Prompt    []int `json:"prompt"`
	NewTokens int   `json:"new_tokens"`
	Tokens    []int `json:"tokens"`
}

type reference struct {
	Decode    []decodeCase `json:"decode"`
	ARGreedy  []arCase     `json:"ar_greedy"`
	modelPath string
}

// load loads the fixture model in float32, closed when the test ends.
func (ref reference) load(t *testing.T, b compute.Backend) *model.Model {
	m, err := model.Load(b, ref.modelPath, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// fixtureModels loads every fixture model folder with its reference.json.
func fixtureModels(t *testing.T) []reference {
	var refs []reference
	for _, dir := range fixtures.Subdirs(t, "models") {
		data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
		require.NoError(t, err)
		var ref reference
		require.NoError(t, json.Unmarshal(data, &ref))
		ref.modelPath = dir
		refs = append(refs, ref)
	}
	return refs
}

func (c decodeCase) config(mode Mode) Config {
	return Config{BlockSize: c.BlockSize, Threshold: c.Threshold, MinReveal: c.MinReveal,
		MaxNewTokens: c.MaxNewTokens, StopTokens: c.StopTokenIDs, Mode: mode, BlocksPerReadback: 1, Trace: true}
}

func (c decodeCase) name(i int) string {
	return fmt.Sprintf("%d_P%d_B%d_t%g_k%d", i, len(c.Prompt), c.BlockSize, c.Threshold, c.MinReveal)
}

// Every decode case of every fixture model: reference mode reproduces the tokens, the
// finish reason, every denoise step and the number of forwards; fused mode the same
// tokens and finish reason with no more forwards.
func TestFixtureDecode(t *testing.T) {
	b := testutil.Backend(t)
	for _, ref := range fixtureModels(t) {
		t.Run(filepath.Base(ref.modelPath), func(t *testing.T) {
			require.NotEmpty(t, ref.Decode)
			m := ref.load(t, b)
			for i, c := range ref.Decode {
				t.Run(c.name(i), func(t *testing.T) {
					require.Equal(t, m.Config.MaskTokenID, c.MaskTokenID)
					want := make([]Step, len(c.Steps))
					for j, s := range c.Steps {
						want[j] = Step{BlockStart: s.BlockStart, Revealed: s.Revealed}
					}
					refRes := generate(t, m, c.config(Reference), c.Prompt)
					require.Equal(t, c.Tokens, refRes.Tokens, "reference tokens")
					require.Equal(t, c.Finish, refRes.Finish, "reference finish")
					require.Equal(t, want, refRes.Steps, "reference steps")
					// The fixture's naive decoder recomputes the whole sequence at every step, so it
					// runs no prefill when the prompt ends inside a block; ours first writes the
					// prompt's full blocks into the cache, one more forward.
					prefillOnly := 0
					if B := c.BlockSize; len(c.Prompt) >= B && len(c.Prompt)%B != 0 {
						prefillOnly = 1
					}
					require.Equal(t, c.ReferenceForwards+prefillOnly, refRes.Stats.Forwards, "reference forwards")
					if c.BlockSize < 4 { // the window padded as on accelerators (backend.MinWindow)
						padded := generateWindow(t, m, c.config(Reference), c.Prompt, 4)
						require.Equal(t, refRes.Tokens, padded.Tokens, "reference tokens, padded window")
						require.Equal(t, refRes.Steps, padded.Steps, "reference steps, padded window")
					}

					// Several blocks per readback: on XLA one While then crosses block boundaries.
					fusedCfg := c.config(Fused)
					fusedCfg.BlocksPerReadback = 3
					fused := generate(t, m, fusedCfg, c.Prompt)
					require.Equal(t, c.Tokens, fused.Tokens, "fused tokens")
					require.Equal(t, c.Finish, fused.Finish, "fused finish")
					require.LessOrEqual(t, fused.Stats.Forwards, refRes.Stats.Forwards, "fused forwards")
				})
			}
		})
	}
}

// Every greedy autoregressive case of every fixture model.
func TestFixtureAutoregressive(t *testing.T) {
	b := testutil.Backend(t)
	for _, ref := range fixtureModels(t) {
		t.Run(filepath.Base(ref.modelPath), func(t *testing.T) {
			require.NotEmpty(t, ref.ARGreedy)
			m := ref.load(t, b)
			for i, c := range ref.ARGreedy {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					// The fixture is a fixed-length greedy run; EOS always stops ours, so
					// the comparison needs a continuation without it.
					for _, eos := range m.Config.EOSTokenIDs {
						require.NotContains(t, c.Tokens, eos)
					}
					cfg := Config{Mode: Autoregressive, BlockSize: 1, Threshold: 0.9, MinReveal: 1,
						MaxNewTokens: c.NewTokens, BlocksPerReadback: 4}
					// One-token windows, and windows padded as on accelerators
					// (backend.MinWindow), whatever this backend pads.
					for _, window := range []int{1, 4} {
						res := generateWindow(t, m, cfg, c.Prompt, window)
						require.Equal(t, c.Tokens, res.Tokens, "window %d", window)
					}
				})
			}
		})
	}
}

func generate(t *testing.T, m *model.Model, cfg Config, prompt []int) *Result {
	t.Helper()
	d, err := New(m, cfg)
	require.NoError(t, err)
	res, err := d.Generate(context.Background(), prompt)
	require.NoError(t, err)
	return res
}

// generateWindow is generate with the decoder's forward window forced to width
// positions, as backend.MinWindow pads it on accelerators.
func generateWindow(t *testing.T, m *model.Model, cfg Config, prompt []int, width int) *Result {
	t.Helper()
	d, err := New(m, cfg)
	require.NoError(t, err)
	d.loop.window = width
	res, err := d.Generate(context.Background(), prompt)
	require.NoError(t, err)
	return res
}
