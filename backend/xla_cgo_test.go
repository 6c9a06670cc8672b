//go:build cgo && !noxla

package backend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// "bdxla" names our backend: only ours reports a missing plugin this way.
func TestBDXLAIsOurBackend(t *testing.T) {
	_, err := NewWithConfig("bdxla:/nonexistent/plugin.so")
	require.ErrorContains(t, err, "hlo: loading the PJRT plugin")
}

// Our backend runs the fused attention as cuDNN's.
func TestHLOAsksForFusedAttention(t *testing.T) {
	require.True(t, AsksForFusedAttention(hlo.NewBuildOnly()))
}
