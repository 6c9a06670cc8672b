//go:build cgo && !noxla

package hlo_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// fusedAttention returns the graph function of a fused attention in layout over its
// inputs q, k, v and, if withBias, an additive bias, with options cfg (Bias set here).
func fusedAttention(layout compute.AttentionAxesLayout, withBias bool, cfg compute.ScaledDotProductAttentionConfig) func(g *Graph, in []*Node) []*Node {
	return func(g *Graph, in []*Node) []*Node {
		if withBias {
			cfg.Bias = InternalBackendOutputs(in[3])[0]
		}
		out, _ := BackendFusedScaledDotProductAttention(in[0], in[1], in[2], layout, &cfg)
		return []*Node{out}
	}
}

// fusedAttentionWithMask is fusedAttention with its fourth input as the boolean mask.
func fusedAttentionWithMask(layout compute.AttentionAxesLayout) func(g *Graph, in []*Node) []*Node {
	return func(g *Graph, in []*Node) []*Node {
		cfg := compute.ScaledDotProductAttentionConfig{Mask: InternalBackendOutputs(in[3])[0]}
		out, _ := BackendFusedScaledDotProductAttention(in[0], in[1], in[2], layout, &cfg)
		return []*Node{out}
	}
}

// cudnnConfig is the part of a cuDNN attention call's backend config the tests check.
type cudnnConfig struct {
	FMHA struct {
		Scale        float64 `json:"fmha_scale"`
		MaskType     string  `json:"mask_type"`
		IsFlash      bool    `json:"is_flash_attention"`
		Intermediate struct {
			Dimensions  []string `json:"dimensions"`
			ElementType string   `json:"element_type"`
		} `json:"intermediate_tensor_shape"`
		BMM1 struct {
			LhsBatch []string `json:"lhs_batch_dimensions"`
			RhsBatch []string `json:"rhs_batch_dimensions"`
		} `json:"bmm1_dot_dimension_numbers"`
		BMM2 struct {
			RhsContracting []string `json:"rhs_contracting_dimensions"`
		} `json:"bmm2_dot_dimension_numbers"`
	} `json:"cudnn_fmha_backend_config"`
}

// cudnnCall returns the target and the parsed backend config of text's one custom call.
func cudnnCall(t *testing.T, text string) (target string, cfg cudnnConfig) {
	t.Helper()
	calls := opTexts(text, "custom_call")
	require.Len(t, calls, 1, text)
	_, rest, ok := strings.Cut(calls[0], `call_target_name = "`)
	require.True(t, ok)
	target, _, _ = strings.Cut(rest, `"`)
	_, rest, ok = strings.Cut(calls[0], "backend_config = ")
	require.True(t, ok)
	quoted, _, _ := strings.Cut(rest, ",\n")
	config, err := strconv.Unquote(quoted)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(config), &cfg), config)
	return target, cfg
}

// The fused attention is one cuDNN custom call whose config describes the operands:
// BSHD or BHSD, as many keys as queries or more (a window over its cache), grouped
// key/value heads passed as they are, with a bias or a causal mask.
func TestFusedAttentionIsCuDNN(t *testing.T) {
	bf16 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.BFloat16, dims...) }
	bshd, bhsd := compute.AttentionAxesLayoutBSHD, compute.AttentionAxesLayoutBHSD
	for _, c := range []struct {
		name     string
		inputs   []shapes.Shape
		fn       func(g *Graph, in []*Node) []*Node
		target   string
		scores   []string // the intermediate [b, heads, t, s]
		batch    []string // bmm1's batch axes
		mask     string
		scale    float64
		wantText string
	}{
		{"BSHD prefill with a bias", []shapes.Shape{bf16(2, 8, 4, 16), bf16(2, 8, 2, 16), bf16(2, 8, 2, 16), bf16(2, 4, 8, 8)},
			fusedAttention(bshd, true, compute.ScaledDotProductAttentionConfig{Scale: 0.5}), "__cudnn$fmhaScaleBiasSoftmax",
			[]string{"2", "4", "8", "8"}, []string{"0", "2"}, "NO_MASK", 0.5,
			// the output [b, heads, t, d] is stored as BSHD, and relabelled so
			"permutation = array<i64: 0, 2, 1, 3> } : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>"},
		{"BHSD window over a cache", []shapes.Shape{bf16(1, 4, 4, 16), bf16(1, 2, 12, 16), bf16(1, 2, 12, 16), bf16(1, 4, 4, 12)},
			fusedAttention(bhsd, true, compute.ScaledDotProductAttentionConfig{}), "__cudnn$fmhaScaleBiasSoftmax",
			[]string{"1", "4", "4", "12"}, []string{"0", "1"}, "NO_MASK", 0.25,
			"result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>"},
		{"BSHD causal", []shapes.Shape{bf16(1, 8, 4, 16), bf16(1, 8, 4, 16), bf16(1, 8, 4, 16)},
			fusedAttention(bshd, false, compute.ScaledDotProductAttentionConfig{Causal: true}), "__cudnn$fmhaSoftmax",
			[]string{"1", "4", "8", "8"}, []string{"0", "2"}, "CAUSAL", 0.25,
			"result_layouts = [dense<[3, 1, 2, 0]> : tensor<4xindex>"},
		{"BSHD prefill with a boolean mask, as a bias broadcast over heads",
			[]shapes.Shape{bf16(2, 8, 4, 16), bf16(2, 8, 2, 16), bf16(2, 8, 2, 16), shapes.Make(dtypes.Bool, 2, 8, 8)},
			fusedAttentionWithMask(bshd), "__cudnn$fmhaScaleBiasSoftmax",
			[]string{"2", "4", "8", "8"}, []string{"0", "2"}, "NO_MASK", 0.25,
			"tensor<2x1x8x8xi1>, tensor<2x1x8x8xbf16>, tensor<2x1x8x8xbf16>) -> tensor<2x1x8x8xbf16>"},
		{"BHSD with a bias of one head", []shapes.Shape{bf16(1, 4, 4, 16), bf16(1, 2, 12, 16), bf16(1, 2, 12, 16), bf16(1, 1, 4, 12)},
			fusedAttention(compute.AttentionAxesLayoutBHSD, true, compute.ScaledDotProductAttentionConfig{}), "__cudnn$fmhaScaleBiasSoftmax",
			[]string{"1", "4", "4", "12"}, []string{"0", "1"}, "NO_MASK", 0.25,
			"tensor<1x1x4x12xbf16>) -> (tensor<1x4x4x16xbf16>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := build(t, c.inputs, c.fn)
			target, cfg := cudnnCall(t, text)
			require.Equal(t, c.target, target)
			require.True(t, cfg.FMHA.IsFlash)
			require.Equal(t, c.scores, cfg.FMHA.Intermediate.Dimensions)
			require.Equal(t, "BF16", cfg.FMHA.Intermediate.ElementType)
			require.Equal(t, c.batch, cfg.FMHA.BMM1.LhsBatch)
			require.Equal(t, c.batch, cfg.FMHA.BMM1.RhsBatch)
			require.Equal(t, c.mask, cfg.FMHA.MaskType)
			require.InDelta(t, c.scale, cfg.FMHA.Scale, 1e-12)
			require.Contains(t, text, c.wantText)
			// the key and value go in as they are: grouped heads are not repeated per query head
			require.Regexp(t, `"stablehlo.custom_call"\(%arg0, %arg1, %arg2(, %(arg3|\d+))?\)`, text)
		})
	}
}

// What cuDNN cannot run is declined, so that GoMLX's callers build plain attention;
// operands that disagree are errors.
func TestFusedAttentionDeclinesAndRejects(t *testing.T) {
	bf16 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.BFloat16, dims...) }
	bshd := compute.AttentionAxesLayoutBSHD
	maskAndBias := func(g *Graph, in []*Node) []*Node {
		m := InternalBackendOutputs(Const(g, [][]bool{{true, false}, {true, true}}))[0]
		cfg := compute.ScaledDotProductAttentionConfig{Mask: m, Bias: InternalBackendOutputs(in[3])[0]}
		out, _ := BackendFusedScaledDotProductAttention(in[0], in[1], in[2], bshd, &cfg)
		return []*Node{out}
	}
	for _, c := range []struct {
		name     string
		inputs   []shapes.Shape
		fn       func(g *Graph, in []*Node) []*Node
		declined bool   // ErrNotImplemented
		errText  string // otherwise
	}{
		{"float32", []shapes.Shape{f32(1, 2, 4, 16), f32(1, 2, 2, 16), f32(1, 2, 2, 16)},
			fusedAttention(bshd, false, compute.ScaledDotProductAttentionConfig{}), true, ""},
		{"a mask and a bias", []shapes.Shape{bf16(1, 2, 4, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 16), bf16(1, 4, 2, 2)},
			maskAndBias, true, ""},
		{"bias of the wrong shape", []shapes.Shape{bf16(1, 2, 4, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 2)},
			fusedAttention(bshd, true, compute.ScaledDotProductAttentionConfig{}), false, "want [1 or 1, 4 or 1, 2, 2]"},
		{"mask of the wrong shape", []shapes.Shape{bf16(1, 2, 4, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 16), shapes.Make(dtypes.Bool, 1, 3, 2)},
			fusedAttentionWithMask(bshd), false, "want [2, 2], [1 or 1, 2, 2] or [1 or 1, 4 or 1, 2, 2]"},
		{"a float mask", []shapes.Shape{bf16(1, 2, 4, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2)},
			fusedAttentionWithMask(bshd), false, "want a boolean"},
		{"causal over more keys", []shapes.Shape{bf16(1, 2, 4, 16), bf16(1, 6, 2, 16), bf16(1, 6, 2, 16)},
			fusedAttention(bshd, false, compute.ScaledDotProductAttentionConfig{Causal: true}), false, "ambiguous"},
		{"heads not in groups", []shapes.Shape{bf16(1, 2, 3, 16), bf16(1, 2, 2, 16), bf16(1, 2, 2, 16)},
			fusedAttention(bshd, false, compute.ScaledDotProductAttentionConfig{}), false, "not groups"},
		{"head dimension 12", []shapes.Shape{bf16(1, 2, 4, 12), bf16(1, 2, 2, 12), bf16(1, 2, 2, 12)},
			fusedAttention(bshd, false, compute.ScaledDotProductAttentionConfig{}), false, "multiples of 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(hlo.PlainBuildOnly(), t.Name())
			err := exceptions.TryCatch[error](func() {
				in := make([]*Node, len(c.inputs))
				for i, s := range c.inputs {
					in[i] = Parameter(g, "", s)
				}
				c.fn(g, in)
			})
			require.Error(t, err)
			require.Equal(t, c.declined, compute.IsNotImplemented(err), "%v", err)
			require.ErrorContains(t, err, c.errText)
		})
	}
}

// With option triton=attention, a window over more keys (BHSD, with a bias) at batch 1
// runs as our Triton kernels, the attention's splits and their combination, as it does
// at batch 8; a prefill keeps cuDNN's.
func TestTritonAttentionLowering(t *testing.T) {
	bf16 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.BFloat16, dims...) }
	b, err := hlo.NewBuildOnlyWithKernels("triton=attention")
	require.NoError(t, err)
	require.True(t, b.FusedAttentionOverCache())
	require.False(t, hlo.PlainBuildOnly().FusedAttentionOverCache())

	window := []shapes.Shape{bf16(1, 16, 4, 128), bf16(1, 2, 516, 128), bf16(1, 2, 516, 128), bf16(1, 16, 4, 516)}
	text := buildOn(t, b, window, fusedAttention(compute.AttentionAxesLayoutBHSD, true, compute.ScaledDotProductAttentionConfig{}))
	calls := tritonCalls(text)
	require.Len(t, calls, 2)
	require.Contains(t, calls[0], "tt.func public @attention(")
	require.Contains(t, calls[0], "grid_x = 68 : i32") // 2 key/value heads × 2 groups of 16 rows × 17 splits
	// the partials of 17 splits of 32 rows, combined by our second kernel, a program per
	// real row of each group, straight into the output, [B, T, Heads, D] as model reads
	// it, transposed for the op's [B, Heads, T, D] (XLA cancels that with model's)
	requireOp(t, text, "custom_call", "1x2x17x32x128xf32>, tensor<1x2x17x32xf32>, tensor<1x2x17x32xf32")
	require.Contains(t, calls[1], "tt.func public @combine(")
	require.Contains(t, calls[1], "grid_x = 64 : i32")
	requireOp(t, text, "custom_call", "1x4x16x128xbf16")
	requireOp(t, text, "transpose", "1x16x4x128xbf16")
	requireOp(t, text, "reduce", "1xi32") // the keys the kernel reads: one past the last visible
	require.NotContains(t, text, "__cudnn$")

	batch8 := []shapes.Shape{bf16(8, 16, 8, 128), bf16(8, 2, 896, 128), bf16(8, 2, 896, 128), bf16(8, 16, 8, 896)}
	over := fusedAttention(compute.AttentionAxesLayoutBHSD, true, compute.ScaledDotProductAttentionConfig{})
	require.Len(t, tritonCalls(buildOn(t, b, batch8, over)), 2)

	prefill := []shapes.Shape{bf16(1, 8, 4, 16), bf16(1, 8, 2, 16), bf16(1, 8, 2, 16), bf16(1, 4, 8, 8)}
	text = buildOn(t, b, prefill, fusedAttention(compute.AttentionAxesLayoutBSHD, true, compute.ScaledDotProductAttentionConfig{}))
	require.Empty(t, tritonCalls(text))
	target, _ := cudnnCall(t, text)
	require.Equal(t, "__cudnn$fmhaScaleBiasSoftmax", target)
}
