//go:build unix

package tokenizer

import (
	"syscall"
	"time"
)

// processCPUTime returns the CPU time (user and system) the process has used so far. Unlike
// wall-clock time, it does not grow when other programs compete for the processor.
func processCPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
