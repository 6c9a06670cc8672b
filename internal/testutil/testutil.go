// Package testutil holds helpers shared by the tests of several packages.
package testutil

import (
	"sync"
	"testing"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/backend"
)

// shared is the one backend of a test binary: an XLA client preallocates most of the
// GPU's memory, so a second one in the same process would run out.
var shared = sync.OnceValues(func() (sharedBackend, error) {
	b, choice, err := backend.New()
	return sharedBackend{b, choice}, err
})

type sharedBackend struct {
	backend compute.Backend
	choice  backend.Choice
}

// Backend returns the backend tests run on, picked as the library would (the Go
// backend unless XLA is configured), and logs the choice. All tests of a binary share
// it; they must not finalize it.
func Backend(tb testing.TB) compute.Backend {
	tb.Helper()
	b, err := shared()
	if err != nil {
		tb.Fatalf("creating backend: %v", err)
	}
	tb.Logf("backend: %s", b.choice)
	return b.backend
}

// PartitioningBackend returns a new client of go-xla's backend on the XLA plugin the
// library would pick (BLOCKDIFF_PJRT_PLUGIN, or one package backend finds), which
// partitions programs over the plugin's devices (backend.ForDevices), finalized when the
// test ends; or skips where there is no plugin. options are appended to its
// configuration (e.g. ",tf32=false"). Tests that use it run alone: a second client in
// the process may find the GPUs' memory taken.
func PartitioningBackend(tb testing.TB, options string) compute.Backend {
	tb.Helper()
	choice := backend.Select()
	if !choice.IsXLA() {
		tb.Skipf("needs an XLA plugin (set %s); the backend is %s", backend.PluginEnv, choice)
	}
	choice = backend.ForDevices(choice, 2)
	b, err := backend.NewWithConfig(choice.Config + options)
	if err != nil {
		tb.Fatalf("creating %s: %v", choice.Config+options, err)
	}
	tb.Cleanup(b.Finalize)
	tb.Logf("backend %s: %d devices", choice.Config+options, b.NumDevices())
	return b
}
