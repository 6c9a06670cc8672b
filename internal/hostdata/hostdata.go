// Package hostdata reads tensors back to the host in the forms the library's packages
// share.
package hostdata

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/gomlx/core/tensors"
)

// Float32s returns a Float32 or BFloat16 tensor's values as float32.
func Float32s(t *tensors.Tensor) ([]float32, error) {
	switch t.DType() {
	case dtypes.Float32:
		return tensors.CopyFlatData[float32](t)
	case dtypes.BFloat16:
		src, err := tensors.CopyFlatData[bfloat16.BFloat16](t)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(src))
		for i, v := range src {
			out[i] = v.Float32()
		}
		return out, nil
	}
	return nil, fmt.Errorf("reading a %s tensor: want Float32 or BFloat16", t.DType())
}
