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
	"github.com/blockdiff/blockdiff/internal/kernels"
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

// With option triton=rope our attention kernel takes the rows and rotates the queries
// itself where the graph names them a window's attention inputs (kernels.WindowQKV),
// built as model builds them: from the rows as they are (bfloat16), or from the float32
// values they round, which it reads whole. The same queries unnamed reach it rotated:
// the backend recognises no chain of operations.
func TestTritonRopeReadsRows(t *testing.T) {
	b, err := hlo.NewBuildOnlyWithKernels("triton=attention,triton=rope")
	require.NoError(t, err)
	f32, bf16 := dtypes.Float32, dtypes.BFloat16
	const heads, kvHeads, d, keys = 4, 2, 16, 64
	inputs := []shapes.Shape{
		shapes.Make(bf16, 1, 1, (heads+2*kvHeads)*d),             // the rows, bfloat16
		shapes.Make(f32, 1, 1, d/2), shapes.Make(f32, 1, 1, d/2), // cos, sin
		shapes.Make(bf16, 1, kvHeads, keys, d), shapes.Make(bf16, 1, kvHeads, keys, d), // k, v
		shapes.Make(bf16, 1, 1, 1, keys),            // bias
		shapes.Make(f32, 1, 1, (heads+2*kvHeads)*d), // the rows, float32
	}
	// rotating returns the type of the rows the kernel reads and the input they are, ""
	// where it reads rotated queries.
	rotating := func(rows func(in []*Node) *Node, mark bool) (xType, operand string) {
		text := buildOn(t, b, inputs, func(g *Graph, in []*Node) []*Node {
			qkv := rows(in)
			cos, sin := InsertAxes(in[1], 2), InsertAxes(in[2], 2)
			qk := rotateHalves(Reshape(SliceAxis(qkv, -1, AxisRange(0, (heads+kvHeads)*d)), 1, 1, heads+kvHeads, d), cos, sin, modelHalves)
			k := SliceAxis(qk, 2, AxisRange(heads, heads+kvHeads))
			v := Reshape(SliceAxis(qkv, -1, AxisRange((heads+kvHeads)*d, (heads+2*kvHeads)*d)), 1, 1, kvHeads, d)
			q := TransposeAllAxes(SliceAxis(qk, 2, AxisRange(0, heads)), 0, 2, 1, 3)
			if mark {
				kernels.Mark(g, kernels.WindowQKV{Rows: kernels.Value(qkv), Query: kernels.Value(q), Keys: kernels.Value(k),
					Values: kernels.Value(v), Cos: kernels.Value(in[1]), Sin: kernels.Value(in[2])})
			}
			bias := InternalBackendOutputs(in[5])[0]
			out, _ := BackendFusedScaledDotProductAttention(q, in[3], in[4], compute.AttentionAxesLayoutBHSD,
				&compute.ScaledDotProductAttentionConfig{Scale: 0.25, Bias: bias})
			return []*Node{out}
		})
		require.Equal(t, 1, tritonCallsWith(text, "tt.func public @attention("), "our attention kernel runs")
		for _, xType := range []string{"bf16", "f32"} {
			if tritonCallsWith(text, "tt.func public @attention(%x: !tt.ptr<"+xType+">") == 1 {
				// The kernel's first operands are the rows, then cos and sin reshaped, in that order.
				call := regexp.MustCompile(`"stablehlo.custom_call"\((%\w+), (%\w+), (%\w+), %arg3, %arg4,`).FindStringSubmatch(text)
				require.NotNil(t, call, "rows, cos, sin, k, v")
				for i, factor := range []string{"%arg1", "%arg2"} {
					require.Contains(t, text, call[i+2]+` = "stablehlo.reshape"(`+factor+`)`)
				}
				// The rows reach it whole, maybe reshaped.
				operand := call[1]
				if m := regexp.MustCompile(regexp.QuoteMeta(operand) + ` = "stablehlo.reshape"\((%\w+)\)`).FindStringSubmatch(text); m != nil {
					operand = m[1]
				}
				return xType, operand
			}
		}
		return "", ""
	}
	bf16Rows := func(in []*Node) *Node { return in[0] }
	f32Rows := func(in []*Node) *Node { return ConvertDType(in[6], bf16) }
	xType, operand := rotating(bf16Rows, true)
	require.Equal(t, "bf16", xType)
	require.Equal(t, "%arg0", operand)
	xType, operand = rotating(f32Rows, true)
	require.Equal(t, "f32", xType, "the float32 rows")
	require.Equal(t, "%arg6", operand)
	xType, _ = rotating(bf16Rows, false)
	require.Empty(t, xType, "not named")
	xType, _ = rotating(f32Rows, false)
	require.Empty(t, xType, "not named")
}
