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

// halves computes the two halves of a rotation from x's halves x1, x2 and cos, sin.
type halves func(x1, x2, cos, sin *Node) (first, second *Node)

// modelHalves are model's rotary.apply's: x1·cos − x2·sin and x2·cos + x1·sin.
func modelHalves(x1, x2, cos, sin *Node) (*Node, *Node) {
	return Sub(Mul(x1, cos), Mul(x2, sin)), Add(Mul(x2, cos), Mul(x1, sin))
}

// rotateHalves is rotary.apply with the halves h computes: of the bf16 x [..., d]
// widened to float32, rounded back to bf16.
func rotateHalves(x, cos, sin *Node, h halves) *Node {
	d := x.Shape().Dimensions[x.Rank()-1]
	x32 := ConvertDType(x, dtypes.Float32)
	first, second := h(SliceAxis(x32, -1, AxisRange(0, d/2)), SliceAxis(x32, -1, AxisRange(d/2, d)), cos, sin)
	return ConvertDType(Concatenate([]*Node{first, second}, -1), dtypes.BFloat16)
}

// With option triton=rope our attention kernel takes the rows x and rotates the
// queries itself only where they are model's rotation of x (rotary.apply); other
// queries, a rotation of the other sign or with cos and sin swapped in one half, reach
// it rotated. Where x is the query and key heads sliced from the bfloat16 rounding of
// the float32 rows of model's fused q/k/v product, the kernel reads those rows whole.
func TestTritonRopeRecognises(t *testing.T) {
	b, err := hlo.NewBuildOnlyWith("triton=attention,triton=rope")
	require.NoError(t, err)
	f32, bf16 := dtypes.Float32, dtypes.BFloat16
	const heads, kvHeads, d, keys = 4, 2, 16, 64
	inputs := []shapes.Shape{
		shapes.Make(bf16, 1, 1, heads+kvHeads, d),                      // x: the query and key heads of one position
		shapes.Make(f32, 1, 1, 1, d/2), shapes.Make(f32, 1, 1, 1, d/2), // cos, sin
		shapes.Make(bf16, 1, kvHeads, keys, d), shapes.Make(bf16, 1, kvHeads, keys, d), // k, v
		shapes.Make(bf16, 1, 1, 1, keys),            // bias
		shapes.Make(f32, 1, 1, (heads+2*kvHeads)*d), // the fused product's rows
	}
	rotate, model := rotateHalves, modelHalves
	// rotating returns the type of x the kernel reads and the input it is, "" where it
	// reads rotated queries.
	rotating := func(queries func(in []*Node) *Node) (xType, operand string) {
		text := buildOn(t, b, inputs, func(g *Graph, in []*Node) []*Node {
			q := TransposeAllAxes(SliceAxis(queries(in), 2, AxisRange(0, heads)), 0, 2, 1, 3)
			bias := InternalBackendOutputs(in[5])[0]
			out, _ := BackendFusedScaledDotProductAttention(q, in[3], in[4], compute.AttentionAxesLayoutBHSD,
				&compute.ScaledDotProductAttentionConfig{Scale: 0.25, Bias: bias})
			return []*Node{out}
		})
		require.Equal(t, 1, tritonCallsWith(text, "tt.func public @attention("), "our attention kernel runs")
		for _, xType := range []string{"bf16", "f32"} {
			if tritonCallsWith(text, "tt.func public @attention(%x: !tt.ptr<"+xType+">") == 1 {
				// The kernel's first operands are x, then cos and sin reshaped, in that order.
				call := regexp.MustCompile(`"stablehlo.custom_call"\((%\w+), (%\w+), (%\w+), %arg3, %arg4,`).FindStringSubmatch(text)
				require.NotNil(t, call, "x, cos, sin, k, v")
				for i, factor := range []string{"%arg1", "%arg2"} {
					require.Contains(t, text, call[i+2]+` = "stablehlo.reshape"(`+factor+`)`)
				}
				// x reaches it whole, maybe reshaped.
				operand := call[1]
				if m := regexp.MustCompile(regexp.QuoteMeta(operand) + ` = "stablehlo.reshape"\((%\w+)\)`).FindStringSubmatch(text); m != nil {
					operand = m[1]
				}
				return xType, operand
			}
		}
		return "", ""
	}
	modelRotation := func(in []*Node) *Node { return rotate(in[0], in[1], in[2], model) }
	xType, operand := rotating(modelRotation)
	require.Equal(t, "bf16", xType)
	require.Equal(t, "%arg0", operand)
	xType, operand = rotating(func(in []*Node) *Node {
		qk := SliceAxis(ConvertDType(in[6], bf16), -1, AxisRange(0, (heads+kvHeads)*d))
		return rotate(Reshape(qk, 1, 1, heads+kvHeads, d), in[1], in[2], model)
	})
	require.Equal(t, "f32", xType, "the fused product's rows")
	require.Equal(t, "%arg6", operand)
	xType, _ = rotating(func(in []*Node) *Node { return in[0] })
	require.Empty(t, xType, "not rotated")
	xType, _ = rotating(func(in []*Node) *Node {
		return rotate(in[0], in[1], in[2], func(x1, x2, cos, sin *Node) (*Node, *Node) {
			return Add(Mul(x1, cos), Mul(x2, sin)), Sub(Mul(x2, cos), Mul(x1, sin))
		})
	})
	require.Empty(t, xType, "the other sign")
	xType, _ = rotating(func(in []*Node) *Node {
		return rotate(in[0], in[1], in[2], func(x1, x2, cos, sin *Node) (*Node, *Node) {
			return Sub(Mul(x1, cos), Mul(x2, sin)), Add(Mul(x2, sin), Mul(x1, cos))
		})
	})
	require.Empty(t, xType, "sin and cos swapped in the second half")
}
