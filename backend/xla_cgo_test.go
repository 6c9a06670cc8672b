//go:build cgo && !noxla

package backend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// "hlo" names our backend, not go-xla's alias of "xla": only ours reports a missing
// plugin this way.
func TestHLOIsOurBackend(t *testing.T) {
	_, err := NewWithConfig("hlo:/nonexistent/plugin.so")
	require.ErrorContains(t, err, "hlo: loading the PJRT plugin")
}

func TestHLODoesNotAskForFusedAttention(t *testing.T) {
	require.False(t, AsksForFusedAttention(hlo.NewBuildOnly()))
}
