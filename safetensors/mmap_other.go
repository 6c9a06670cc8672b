//go:build !unix

package safetensors

import (
	"fmt"
	"io"
	"os"
)

// mapFile reads the first size bytes of f into memory: the portable stand-in for a
// memory mapping where this package does not use one.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("%d bytes is too large to read into memory", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
