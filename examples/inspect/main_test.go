package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// -context out of range is an error naming it; the example file inspects.
func TestInspect(t *testing.T) {
	require.NoError(t, checkContext(*context_))
	require.ErrorContains(t, checkContext(-4096), "-context -4096: want 1 to")
	require.ErrorContains(t, checkContext(0), "-context 0")
	require.ErrorContains(t, checkContext(1<<40), "-context 1099511627776")
	path, err := writeExample(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, inspect(path))
}
