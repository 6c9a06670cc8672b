package modelcore

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads best unqualified, as in GoMLX.
	"github.com/gomlx/gomlx/core/tensors"
)

// Linear is a linear layer without bias: y = x·Wᵀ. The dense implementation is
// [Dense]; package quant provides FP8 ones.
type Linear interface {
	// Params are the device tensors the layer reads, in the order Apply receives
	// them as graph nodes.
	Params() []*tensors.Tensor
	// Apply maps x [..., in] to [..., out], in x's dtype. params are the nodes of
	// Params().
	Apply(x *Node, params []*Node) *Node
	// InFeatures and OutFeatures are the layer's input and output sizes.
	InFeatures() int
	OutFeatures() int
}

// Float32Linear is a [Linear] that can also return float32 outputs from lower-precision
// inputs without rounding them to the input's dtype. Forward uses it when available: the
// residual stream and the logits stay float32 in bf16 models (confidences and near-ties
// depend on it).
type Float32Linear interface {
	Linear
	ApplyFloat32(x *Node, params []*Node) *Node
}

// Dense is a linear layer whose weight [out, in] is stored in the compute dtype, as in
// the checkpoint (HF's nn.Linear layout).
type Dense struct {
	Weight *tensors.Tensor
}

// Params implements [Linear].
func (d *Dense) Params() []*tensors.Tensor { return []*tensors.Tensor{d.Weight} }

// Apply implements [Linear].
func (d *Dense) Apply(x *Node, params []*Node) *Node {
	return denseApply(x, params[0])
}

// ApplyFloat32 implements [Float32Linear]: the products accumulate and stay in float32.
func (d *Dense) ApplyFloat32(x *Node, params []*Node) *Node {
	w := params[0]
	if w.DType() != x.DType() {
		w = ConvertDType(w, x.DType())
	}
	return Dot(x, w).WithOutputDType(dtypes.Float32).General([]int{x.Rank() - 1}, nil, []int{1}, nil)
}

// InFeatures implements [Linear].
func (d *Dense) InFeatures() int { return d.Weight.Shape().Dimensions[1] }

// OutFeatures implements [Linear].
func (d *Dense) OutFeatures() int { return d.Weight.Shape().Dimensions[0] }

// denseApply computes x·Wᵀ for x [..., in] and w [out, in], converting w to x's dtype
// when they differ.
func denseApply(x, w *Node) *Node {
	if w.DType() != x.DType() {
		w = ConvertDType(w, x.DType())
	}
	return DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)
}

// linearName names the fused linear layers of a decoder layer, for calibration files
// and error messages.
func linearName(layer int, kind string) string {
	return fmt.Sprintf("model.layers.%d.%s", layer, kind)
}
