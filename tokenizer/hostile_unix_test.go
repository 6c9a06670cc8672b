//go:build unix

package tokenizer

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoadDirRefusesFIFOs checks that a FIFO in place of a file is refused at once: reading
// one would wait for a writer forever.
func TestLoadDirRefusesFIFOs(t *testing.T) {
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		dir := t.TempDir()
		if name != "tokenizer.json" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinySpec{vocab: []string{"a"}}.json(t), 0o644))
		}
		require.NoError(t, syscall.Mkfifo(filepath.Join(dir, name), 0o644))
		done := make(chan error, 1)
		go func() {
			_, err := LoadDir(dir)
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorContains(t, err, "not a regular file", name)
			require.ErrorContains(t, err, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("LoadDir blocked on a FIFO named %s", name)
		}
	}
}
