//go:build !unix

package tokenizer

import "time"

// processCPUTime is not available on this platform.
func processCPUTime() (time.Duration, bool) { return 0, false }
