//go:build unix

package regularfile

import "syscall"

// nonBlock opens without blocking on a pipe that has no writer.
const nonBlock = syscall.O_NONBLOCK
