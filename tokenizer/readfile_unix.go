//go:build unix

package tokenizer

import (
	"os"
	"syscall"
)

// openNoBlock opens path for reading without blocking, as opening a FIFO otherwise does
// until a writer appears.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
