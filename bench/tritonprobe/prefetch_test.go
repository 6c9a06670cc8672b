//go:build cgo && !noxla

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The prefetch kernel's TTIR has every mark replaced (none is a prefix of another's
// value) and asks for W with its op's PTX, whose own operands ($0, $1) stay.
func TestPrefetchTTIR(t *testing.T) {
	for _, op := range prefetchOps {
		ir := prefetchTTIR(op, 8192, 128)
		require.NotRegexp(t, `\$[A-Z]`, ir, op.name)
		require.Contains(t, ir, op.ptx+" mov.u32 $0, 0;", op.name)
		require.Contains(t, ir, "%coff = arith.addi %coff_bases, %coff_iota : tensor<128xi32>", op.name)
		require.Contains(t, ir, "%xn = arith.constant dense<8192> : tensor<128xi32>", op.name)
	}
}
