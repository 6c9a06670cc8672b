//go:build unix

package regularfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A named pipe, a folder and a device are refused at once, without blocking; a link to
// a regular file is followed; a file over the limit is refused.
func TestRefusesAllButRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.safetensors")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, kind := range map[string]string{fifo: "named pipe", dir: "folder", "/dev/zero": "device"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(path, 1<<20); done <- err }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrNotRegular, path)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, kind)
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %s blocks", path)
		}
	}

	file := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(file, []byte("0123456789"), 0o600))
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(file, link))
	data, err := ReadFile(link, 10)
	require.NoError(t, err)
	require.Equal(t, "0123456789", string(data))
	_, err = ReadFile(file, 9)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, file)
	_, err = ReadFile(filepath.Join(dir, "missing"), 9)
	require.True(t, errors.Is(err, os.ErrNotExist))

	f, info, err := Open(file)
	require.NoError(t, err)
	defer f.Close()
	require.EqualValues(t, 10, info.Size())
}
