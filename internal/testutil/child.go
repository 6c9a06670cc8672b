package testutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/blockdiff/blockdiff/backend"
)

// childEnv names the test a test binary runs as a child of [InChild].
const childEnv = "BLOCKDIFF_TEST_CHILD"

// InChild runs the calling top-level test again in a child process (the test binary,
// for that test alone) with at most memory more bytes of memory and timeout of time,
// so that a case that would exhaust memory or hang kills the child, not the test
// binary: it reports whether the caller is the child, which then runs the test's body.
// The parent returns false once the child has ended, and fails the test unless the
// child passed.
//
// The child limits its address space (RLIMIT_AS, where the platform has it) to what it
// holds when it starts plus memory, and checks at the end that the memory the Go
// runtime took from the system stayed below memory; under the race detector, which
// reserves far more address space than it uses, only the check applies. On XLA the
// test runs in the process itself, unlimited: a second XLA client would find the
// device's memory taken by the first.
func InChild(t *testing.T, memory int64, timeout time.Duration) bool {
	t.Helper()
	if backend.Select().IsXLA() {
		t.Logf("on XLA: running in this process, without the child's limits")
		return true
	}
	if os.Getenv(childEnv) == t.Name() {
		limitChild(t, memory)
		return true
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("InChild runs top-level tests only, not %s", t.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		t.Fatalf("the child process ran past its %s limit:\n%s", timeout, out)
	case err != nil:
		t.Fatalf("the child process failed (%v):\n%s", err, out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatalf("the child process did not run %s:\n%s", t.Name(), out)
	}
	t.Logf("child process passed under a limit of %d bytes and %s", memory, timeout)
	return false
}

// limitChild applies InChild's limits to the running child.
func limitChild(t *testing.T, memory int64) {
	base := addressSpace()
	if !raceEnabled && base > 0 {
		if err := limitAddressSpace(base + memory); err != nil {
			t.Fatalf("limiting the address space: %v", err)
		}
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.SetMemoryLimit(memory)
	t.Cleanup(func() {
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if grown := int64(after.Sys) - int64(before.Sys); grown > memory {
			t.Errorf("the Go runtime took %d more bytes from the system, over the limit of %d", grown, memory)
		}
	})
}
