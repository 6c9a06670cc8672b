//go:build linux

package testutil

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// addressSpace is the process's virtual memory size in bytes (0 if unknown).
func addressSpace() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// limitAddressSpace caps the process's virtual memory at bytes: allocations past it
// fail, and the Go runtime then ends the process.
func limitAddressSpace(bytes int64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		return err
	}
	lim.Cur = uint64(bytes)
	if lim.Max < lim.Cur {
		lim.Cur = lim.Max
	}
	return syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
}
