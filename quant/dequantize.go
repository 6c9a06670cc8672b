package quant

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// Dequantize replaces a model's FP8 linear layers with dense ones holding their weights'
// exact values (byte decoded × scale, rounded once to the model's dtype), so that code
// that needs dense layers (training, the training forward's evaluations) can run an FP8
// checkpoint's weights. Activations are no longer quantized. Dense layers are kept.
func Dequantize(pub *model.Model) error {
	m := modelcore.Of(pub)
	for _, nl := range m.Linears() {
		q, ok := nl.Linear.(*FP8Linear)
		if !ok {
			continue
		}
		bytes, err := tensors.CopyFlatData[uint8](q.Weight)
		if err != nil {
			return fmt.Errorf("quant: %s: reading the weight: %w", nl.Name, err)
		}
		scales, err := tensors.CopyFlatData[float32](q.WeightScale)
		if err != nil {
			return fmt.Errorf("quant: %s: reading the scale: %w", nl.Name, err)
		}
		out, in := q.OutFeatures(), q.InFeatures()
		values := make([]float32, out*in)
		for o := range out {
			scale := scales[0]
			if len(scales) == out {
				scale = scales[o]
			}
			DecodeE4M3Slice(values[o*in:(o+1)*in], bytes[o*in:(o+1)*in], scale)
		}
		var w *tensors.Tensor
		switch m.DType {
		case dtypes.Float32:
			w = tensors.FromFlatDataAndDimensions(values, out, in)
		case dtypes.BFloat16:
			bf := make([]bfloat16.BFloat16, len(values))
			for i, v := range values {
				bf[i] = bfloat16.FromFloat32(v)
			}
			w = tensors.FromFlatDataAndDimensions(bf, out, in)
		default:
			return fmt.Errorf("quant: dequantizing into %s: want Float32 or BFloat16", m.DType)
		}
		nl.Set(&modelcore.Dense{Weight: w})
		for _, t := range []*tensors.Tensor{q.Weight, q.WeightScale, q.InputScale} {
			if t != nil {
				_ = t.FinalizeAll()
			}
		}
	}
	return nil
}
