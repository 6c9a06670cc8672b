//go:build linux

package tokenizer

import (
	"runtime/debug"
	"syscall"
)

// childLimitsSupported reports whether limitChild can bound a child test process.
const childLimitsSupported = true

// limitChild bounds the memory and stack of this (child) test process, so that a case
// that escaped its budget dies quickly with a fatal error the parent sees.
func limitChild(addressSpace uint64, stack int) error {
	debug.SetMaxStack(stack)
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: addressSpace, Max: addressSpace})
}
