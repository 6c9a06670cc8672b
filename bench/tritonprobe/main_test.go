//go:build cgo && !noxla

package main

import (
	"strings"
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

// The persistent chain's TTIR has every mark replaced, the chain's constants written,
// and the GEMV kernel's body inside its loop reading the phase's x, W and output slot.
func TestChainTTIR(t *testing.T) {
	ir, err := chainTTIR(2048, 2048, chainTile)
	require.NoError(t, err)
	require.NotRegexp(t, `\$[A-Z]`, ir)
	for _, want := range []string{"%chain_len = arith.constant 16 : i32", "%chain_g = arith.constant 128 : i32",
		"%chain_gm1 = arith.constant 127 : i32", "%chain_nk = arith.constant 4194304 : i32",
		"%chain_mn = arith.constant 8192 : i32", "tt.splat %chain_x : !tt.ptr<bf16>", "tt.splat %chain_w : !tt.ptr<bf16>",
		"tt.splat %chain_y : !tt.ptr<bf16>", "tensor<16x256xbf16> * tensor<256x16xbf16> -> tensor<16x16xf32>"} {
		require.Contains(t, ir, want)
	}
	require.Equal(t, 1, strings.Count(ir, "tt.return"))
}
