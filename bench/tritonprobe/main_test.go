//go:build cgo && !noxla

package main

import (
	"fmt"
	"regexp"
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

// The MLP kernel's TTIR: every mark replaced, one PDL mark of each kind, gate/up's
// tiles shared out over the down GEMV's programs, each program's first W tiles of the
// down projection loaded before the barrier and their steps computed after it, the
// loop running from the step after them; and no value defined twice.
func TestMLPTTIR(t *testing.T) {
	for _, v := range mlpVariants {
		ir, err := mlpTTIR(v)
		require.NoError(t, err, "%v", v)
		require.NotRegexp(t, `\$[A-Z]`, ir, "%v", v)
		require.Equal(t, 1, strings.Count(ir, pdlWait), "%v", v)
		require.Equal(t, 1, strings.Count(ir, pdlLaunch), "%v", v)
		require.Equal(t, 1, strings.Count(ir, "tt.return"), "%v", v)
		defined := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^\s*(%\w+)(?::\d+)? = `).FindAllStringSubmatch(ir, -1) {
			require.False(t, defined[m[1]], "%v: %s defined twice", v, m[1])
			defined[m[1]] = true
		}
		programs := v.programs()
		require.Contains(t, ir, fmt.Sprintf("%%m_G = arith.constant %d : i32", programs), "%v", v)
		require.Contains(t, ir, fmt.Sprintf("%%m_T = arith.constant %d : i32", v.gateUp.Programs(2*mlpF)/programs), "%v", v)
		barrier := strings.Index(ir, "    gpu.barrier\n    %m_arrived")
		loop := strings.Index(ir, "%b_acc = scf.for %b_k = %b_kpeel to")
		require.True(t, barrier >= 0 && barrier < loop, "%v: the barrier, then the loop", v)
		require.Contains(t, ir, fmt.Sprintf("%%b_kpeel_off = arith.constant %d : i32", v.peel*v.down.BK), "%v", v)
		if v.peel == 0 {
			require.Contains(t, ir, "iter_args(%b_a = %b_zero)", "%v", v)
			continue
		}
		lastLoad := strings.Index(ir, fmt.Sprintf("%%b_wv_%d = tt.load", v.peel-1))
		firstStep := strings.Index(ir, "%b_wf_0 = arith.extf %b_wv_0")
		require.True(t, lastLoad >= 0 && lastLoad < barrier && barrier < firstStep && firstStep < loop, "%v: loads, barrier, steps", v)
		require.Contains(t, ir, fmt.Sprintf("iter_args(%%b_a = %%b_a1_%d)", v.peel-1), "%v", v)
	}
	_, _, _, err := mlpPrograms(mlpVariants[0], 2)
	require.NoError(t, err)
}
