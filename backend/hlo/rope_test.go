//go:build cgo && !noxla

package hlo_test

import (
	"regexp"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// With option triton=rope our attention kernel takes the rows x and rotates the
// queries itself only where they are model's rotation of x (rotary.apply); other
// queries, a rotation of the other sign or with cos and sin swapped in one half, reach
// it rotated.
func TestTritonRopeRecognises(t *testing.T) {
	b, err := hlo.NewBuildOnlyWith("triton=attention,triton=rope")
	require.NoError(t, err)
	f32, bf16 := dtypes.Float32, dtypes.BFloat16
	const heads, kvHeads, d, keys = 4, 2, 16, 64
	inputs := []shapes.Shape{
		shapes.Make(bf16, 1, 1, heads+kvHeads, d),                      // x: the query and key heads of one position
		shapes.Make(f32, 1, 1, 1, d/2), shapes.Make(f32, 1, 1, 1, d/2), // cos, sin
		shapes.Make(bf16, 1, kvHeads, keys, d), shapes.Make(bf16, 1, kvHeads, keys, d), // k, v
		shapes.Make(bf16, 1, 1, 1, keys), // bias
	}
	// rotate is rotary.apply, with the signs and factors of its two halves as given.
	type halves func(x1, x2, cos, sin *Node) (first, second *Node)
	rotate := func(x, cos, sin *Node, h halves) *Node {
		x32 := ConvertDType(x, f32)
		first, second := h(SliceAxis(x32, -1, AxisRange(0, d/2)), SliceAxis(x32, -1, AxisRange(d/2, d)), cos, sin)
		return ConvertDType(Concatenate([]*Node{first, second}, -1), bf16)
	}
	model := func(x1, x2, cos, sin *Node) (*Node, *Node) {
		return Sub(Mul(x1, cos), Mul(x2, sin)), Add(Mul(x2, cos), Mul(x1, sin))
	}
	rotating := func(queries func(x, cos, sin *Node) *Node) int {
		text := buildOn(t, b, inputs, func(g *Graph, in []*Node) []*Node {
			q := TransposeAllAxes(SliceAxis(queries(in[0], in[1], in[2]), 2, AxisRange(0, heads)), 0, 2, 1, 3)
			bias := InternalBackendOutputs(in[5])[0]
			out, _ := BackendFusedScaledDotProductAttention(q, in[3], in[4], compute.AttentionAxesLayoutBHSD,
				&compute.ScaledDotProductAttentionConfig{Scale: 0.25, Bias: bias})
			return []*Node{out}
		})
		require.Equal(t, 1, tritonCallsWith(text, "tt.func public @attention("), "our attention kernel runs")
		n := tritonCallsWith(text, "tt.func public @attention(%x: !tt.ptr<bf16>")
		if n == 1 {
			// The kernel's first operands are x, then cos and sin reshaped, in that order.
			call := regexp.MustCompile(`"stablehlo.custom_call"\(%arg0, (%\w+), (%\w+), %arg3, %arg4,`).FindStringSubmatch(text)
			require.NotNil(t, call, "x, cos, sin, k, v")
			for i, factor := range []string{"%arg1", "%arg2"} {
				require.Contains(t, text, call[i+1]+` = "stablehlo.reshape"(`+factor+`)`)
			}
		}
		return n
	}
	require.Equal(t, 1, rotating(func(x, cos, sin *Node) *Node { return rotate(x, cos, sin, model) }))
	require.Zero(t, rotating(func(x, cos, sin *Node) *Node { return x }), "not rotated")
	require.Zero(t, rotating(func(x, cos, sin *Node) *Node {
		return rotate(x, cos, sin, func(x1, x2, cos, sin *Node) (*Node, *Node) {
			return Add(Mul(x1, cos), Mul(x2, sin)), Sub(Mul(x2, cos), Mul(x1, sin))
		})
	}), "the other sign")
	require.Zero(t, rotating(func(x, cos, sin *Node) *Node {
		return rotate(x, cos, sin, func(x1, x2, cos, sin *Node) (*Node, *Node) {
			return Sub(Mul(x1, cos), Mul(x2, sin)), Add(Mul(x2, sin), Mul(x1, cos))
		})
	}), "sin and cos swapped in the second half")
}
