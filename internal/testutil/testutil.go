// Package testutil holds helpers shared by the tests of several packages.
package testutil

import (
	"testing"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/backend"
)

// Backend returns the backend tests run on, picked as the library would (the Go
// backend unless XLA is configured), and logs the choice.
func Backend(tb testing.TB) compute.Backend {
	tb.Helper()
	b, choice, err := backend.New()
	if err != nil {
		tb.Fatalf("creating backend: %v", err)
	}
	tb.Logf("backend: %s", choice)
	return b
}
