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
