package testutil

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A child under InChild's limits that allocates far past them ends (the Go runtime
// reports out of memory) instead of taking the memory; one that allocates little passes.
func TestChildLimits(t *testing.T) {
	if raceEnabled || runtime.GOOS != "linux" {
		t.Skip("the address-space limit applies on Linux without the race detector")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHugeAllocation$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=TestHugeAllocation")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "out of memory")
}

// TestHugeAllocation allocates 8 GiB under a limit of 256 MiB: it only runs as the
// child of TestChildLimits.
func TestHugeAllocation(t *testing.T) {
	if os.Getenv(childEnv) != t.Name() {
		t.Skip("runs as the child of TestChildLimits")
	}
	limitChild(t, 256<<20)
	huge := make([]byte, 8<<30)
	huge[len(huge)-1] = 1
	t.Logf("allocated %d bytes", len(huge))
}

// A child that stays within its limits passes, and the parent sees it pass.
func TestInChild(t *testing.T) {
	if !InChild(t, 256<<20, time.Minute) {
		return
	}
	small := make([]byte, 1<<20)
	small[0] = 1
}
