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
