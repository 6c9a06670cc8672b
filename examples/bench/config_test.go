package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/model"
)

// -config builds the shape of a config.json: MiniCPM5-2B's without it; a config that
// names no mask token masks with its last vocabulary row; a bad path is an error.
func TestRandomConfig(t *testing.T) {
	cfg, err := randomConfig("")
	require.NoError(t, err)
	require.Equal(t, model.MiniCPM5_2B, cfg)

	dir := t.TempDir()
	config := `{"architectures": ["MiniCPMForCausalLM"], "vocab_size": 1000, "hidden_size": 256,
		"intermediate_size": 640, "num_hidden_layers": 2, "num_attention_heads": 4,
		"max_position_embeddings": 512, "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 64}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644))
	cfg, err = randomConfig(dir)
	require.NoError(t, err)
	require.Equal(t, model.ArchMiniCPM, cfg.Architecture)
	require.Equal(t, []int{256, 640, 2, 64}, []int{cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.HeadDim})
	require.Equal(t, 999, cfg.MaskTokenID)

	_, err = randomConfig(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "-config")
}

// The shapes under bench/shapes are configs -config takes.
func TestShapes(t *testing.T) {
	paths, err := filepath.Glob("../../bench/shapes/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		cfg, err := randomConfig(path)
		require.NoError(t, err, path)
		require.Equal(t, cfg.VocabSize-1, cfg.MaskTokenID, path)
	}
}
