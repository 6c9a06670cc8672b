//go:build unix

package safetensors

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// withinSeconds fails the test if f does not return within a few seconds (it would block
// forever on a named pipe opened for reading).
func withinSeconds[T any](t *testing.T, f func() (T, error)) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := f(); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("blocked: a named pipe was opened for reading")
		return nil
	}
}

// Named pipes in a checkpoint folder, as the single file, as the index or as a shard the
// index lists, are refused at once with an error naming them, not opened for reading.
func TestNamedPipesAreRefused(t *testing.T) {
	single := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(single, SingleFileName), 0o600))
	err := withinSeconds(t, func() (*File, error) { return Open(filepath.Join(single, SingleFileName)) })
	require.ErrorContains(t, err, filepath.Join(single, SingleFileName)+": not a regular file (a named pipe)")
	err = withinSeconds(t, func() (Checkpoint, error) { return OpenCheckpoint(single) })
	require.ErrorContains(t, err, "not a regular file (a named pipe)")

	index := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(index, IndexFileName), 0o600))
	err = withinSeconds(t, func() (Checkpoint, error) { return OpenCheckpoint(index) })
	require.ErrorContains(t, err, filepath.Join(index, IndexFileName)+": not a regular file (a named pipe)")

	shard := shardedDir(t)
	require.NoError(t, os.Remove(filepath.Join(shard, "b.safetensors")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(shard, "b.safetensors"), 0o600))
	writeIndex(t, shard, `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}}`)
	err = withinSeconds(t, func() (Checkpoint, error) { return OpenCheckpoint(shard) })
	require.ErrorContains(t, err, filepath.Join(shard, "b.safetensors")+": not a regular file (a named pipe)")
}

// An index larger than MaxIndexSize is refused before it is read (a sparse file here,
// so the test writes nothing of that size).
func TestHugeIndexIsRefused(t *testing.T) {
	dir := shardedDir(t)
	path := writeIndex(t, dir, `{"weight_map":{}}`)
	require.NoError(t, os.Truncate(path, MaxIndexSize+1))
	_, err := OpenSharded(path)
	require.ErrorContains(t, err, path+": index too large")
	var formatErr *FormatError
	require.ErrorAs(t, err, &formatErr)
}

// A link to itself and a link out of the folder: the first is an error, the second is
// followed (Hugging Face's cache links a snapshot's files to its blobs elsewhere).
func TestSymbolicLinks(t *testing.T) {
	dir := t.TempDir()
	loop := filepath.Join(dir, SingleFileName)
	require.NoError(t, os.Symlink(loop, loop))
	_, err := OpenCheckpoint(dir)
	require.ErrorContains(t, err, "too many levels of symbolic links")

	blobs, snapshot := t.TempDir(), t.TempDir()
	writeShard(t, blobs, "blob", "w")
	require.NoError(t, os.Symlink(filepath.Join(blobs, "blob"), filepath.Join(snapshot, SingleFileName)))
	ckpt, err := OpenCheckpoint(snapshot)
	require.NoError(t, err)
	require.NoError(t, ckpt.Close())
}
