//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/gomlx/go-xla/pjrt"
	"github.com/stretchr/testify/require"
)

func TestParseOptions(t *testing.T) {
	options, noTF32, err := parseOptions("preallocate=false,notf32")
	require.NoError(t, err)
	require.Equal(t, pjrt.NamedValuesMap{"preallocate": false}, options)
	require.True(t, noTF32)

	options, noTF32, err = parseOptions("")
	require.NoError(t, err)
	require.Nil(t, options)
	require.False(t, noTF32)

	_, _, err = parseOptions("preallocate=maybe")
	require.Error(t, err)
	_, _, err = parseOptions("memory_fraction=0.5")
	require.ErrorContains(t, err, "unknown option")
}
