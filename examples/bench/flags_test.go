package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The defaults pass; a flag out of range is an error naming it.
func TestCheckFlags(t *testing.T) {
	require.NoError(t, checkFlags())
	ints := map[string]*int{"layers": layers, "context": context_, "capacity": capacity, "iters": iters, "added-steps": added,
		"new": newTokens, "blocks-per-readback": readbackFlag, "prefill-capacity": prefillCap, "added-prefills": addedPrefill}
	for name, p := range ints {
		saved := *p
		*p = -1
		require.ErrorContains(t, checkFlags(), "-"+name+" -1: want", name)
		*p = saved
	}
	saved := *context_
	*context_ = *capacity
	require.ErrorContains(t, checkFlags(), "need room for a window")
	*context_ = saved
	for p, value := range map[*string]string{batches: "1,x,8", prefillToks: "0", steps: "denoise,warp", only: "steps,all", loopExit: "never"} {
		old := *p
		*p = value
		require.Error(t, checkFlags(), value)
		*p = old
	}
	require.NoError(t, checkFlags())
}
