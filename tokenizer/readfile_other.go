//go:build !unix

package tokenizer

import "os"

// openNoBlock opens path for reading.
func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
