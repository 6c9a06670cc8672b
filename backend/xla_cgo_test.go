//go:build cgo && !noxla

package backend

import (
	"testing"

	"github.com/gomlx/compute"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// "bdxla" names our backend: only ours reports a missing plugin this way.
func TestBDXLAIsOurBackend(t *testing.T) {
	require.Equal(t, hlo.BackendName, ourBackend)
	require.Equal(t, hlo.InPlaceMarker, InPlaceMarker)
	require.True(t, AttentionLogSumExp(hlo.NewBuildOnly()))
	_, err := NewWithConfig("bdxla:/nonexistent/plugin.so")
	require.ErrorContains(t, err, "hlo: loading the PJRT plugin")
}

// Our backend runs the fused attention as cuDNN's.
func TestHLOAsksForFusedAttention(t *testing.T) {
	require.True(t, AsksForFusedAttention(hlo.NewBuildOnly()))
}

// One-token windows pad to 4 positions below 64 rows on an accelerator without our
// kernels, and at no batch where the backend places windows (ours, by default).
func TestMinWindow(t *testing.T) {
	plain, err := hlo.NewBuildOnlyWith("nokernels")
	require.NoError(t, err)
	onGo, err := NewWithConfig(GoConfig)
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		b       compute.Backend
		batches []int
		want    []int
	}{
		{"XLA-like", plain, []int{1, 8, 63, 64, 256}, []int{4, 4, 4, 1, 1}},
		{"places windows", hlo.NewBuildOnly(), []int{1, 2, 8, 63, 64}, []int{1, 1, 1, 1, 1}},
		{"Go", onGo, []int{1, 8, 64}, []int{1, 1, 1}},
	} {
		for i, batch := range c.batches {
			require.Equal(t, c.want[i], MinWindow(c.b, batch), "%s, batch %d", c.name, batch)
		}
	}
}
