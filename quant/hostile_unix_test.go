//go:build unix

package quant

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A config.json that is a named pipe is refused at once, not read.
func TestConfigNamedPipe(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "config.json"), 0o600))
	done := make(chan error, 1)
	go func() { _, err := IsFP8Checkpoint(dir); done <- err }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "not a regular file (a named pipe)")
	case <-time.After(10 * time.Second):
		t.Fatal("IsFP8Checkpoint blocks on a named pipe")
	}
}
