package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's first command: the demo model generates and prints its statistics.
func TestDemoRuns(t *testing.T) {
	*maxTokens = 16
	require.NoError(t, run())
}

// The flags given override the preset's settings; the others keep them.
func TestDecodeConfigFlags(t *testing.T) {
	defer func(r, m int) { *readback, *minReveal = r, m }(*readback, *minReveal)
	*readback, *minReveal = 4, 0
	cfg, err := decodeConfig()
	require.NoError(t, err)
	require.Equal(t, 4, cfg.BlocksPerReadback)
	require.Equal(t, 1, cfg.MinReveal, "the quality preset's")
}
