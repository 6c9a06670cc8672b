package modelcore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/safetensors"
)

// copyCheckpoint writes a fixture model's config and tensors to a temporary folder,
// letting edit change, drop (return false) or add tensors first.
func copyCheckpoint(t *testing.T, edit func(w *safetensors.Writer, info safetensors.TensorInfo, data []byte) bool) string {
	t.Helper()
	src := fixtures.Subdirs(t, "models")[0]
	dst := t.TempDir()
	config, err := os.ReadFile(filepath.Join(src, "config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dst, "config.json"), config, 0o644))
	ckpt, err := safetensors.OpenCheckpoint(src)
	require.NoError(t, err)
	defer ckpt.Close()
	var w safetensors.Writer
	for _, info := range ckpt.Tensors() {
		data, err := ckpt.Bytes(info.Name)
		require.NoError(t, err)
		if edit(&w, info, data) {
			require.NoError(t, w.Add(info.Name, info.DType, info.Shape, data))
		}
	}
	require.NoError(t, w.WriteFile(filepath.Join(dst, "model.safetensors")))
	return dst
}

func TestLoadErrorsNameTheTensor(t *testing.T) {
	b := testutil.Backend(t)
	const victim = "model.layers.1.self_attn.k_proj.weight"
	cases := map[string]struct {
		edit func(w *safetensors.Writer, info safetensors.TensorInfo, data []byte) bool
		want string
	}{
		"missing": {func(_ *safetensors.Writer, info safetensors.TensorInfo, _ []byte) bool {
			return info.Name != victim
		}, `missing tensor "` + victim + `"`},
		"misshapen": {func(w *safetensors.Writer, info safetensors.TensorInfo, data []byte) bool {
			if info.Name != victim {
				return true
			}
			shape := []int{info.Shape[1], info.Shape[0]}
			require.NoError(t, w.Add(info.Name, info.DType, shape, data))
			return false
		}, `tensor "` + victim + `" has shape`},
		"unexpected": {func(w *safetensors.Writer, info safetensors.TensorInfo, data []byte) bool {
			if info.Name == victim {
				require.NoError(t, w.Add("model.layers.1.self_attn.extra.weight", info.DType, info.Shape, data))
			}
			return true
		}, `unexpected tensor(s) in the checkpoint: ["model.layers.1.self_attn.extra.weight"]`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := Load(b, copyCheckpoint(t, c.edit), LoadOptions{DType: dtypes.Float32})
			require.ErrorContains(t, err, c.want)
			require.Nil(t, m)
		})
	}
}

func TestBadInputs(t *testing.T) {
	m, err := Load(testutil.Backend(t), fixtures.Subdirs(t, "models")[0], LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	defer m.Close()
	vocab := m.Config.VocabSize

	_, err = m.Logits([]int{1, vocab}, 4)
	require.ErrorContains(t, err, "outside the vocabulary")
	_, err = m.Logits([]int{-1}, 4)
	require.ErrorContains(t, err, "outside the vocabulary")
	_, err = m.Logits(nil, 4)
	require.ErrorContains(t, err, "no tokens")

	s, err := m.NewSession(8, 4)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill([]int{1, 2, 3})
	require.ErrorContains(t, err, "whole blocks")
	_, err = s.Prefill(make([]int, 12))
	require.ErrorContains(t, err, "overflow the cache of 8 positions")
	_, err = s.Step(make([]int, 5))
	require.ErrorContains(t, err, "at most one block")
	require.Zero(t, s.Len(), "failed calls leave the cache as it was")

	_, err = m.NewSession(m.Config.MaxPositionEmbeddings+1, 4)
	require.ErrorContains(t, err, "exceeds max_position_embeddings")
}

// A model whose weights were made only in part, as NewRandom or Load leave one that
// fails half way before closing it, closes without error.
func TestCloseOfPartialModel(t *testing.T) {
	m := newModel(testutil.Backend(t), benchConfig(), dtypes.Float32)
	m.Layers = []Layer{{QKV: &Dense{}, O: &Dense{}, GateUp: &Dense{}, Down: &Dense{}}}
	m.Head = &Dense{}
	require.NoError(t, m.Close())
}
