//go:build cgo && !noxla

package hlo

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
)

// Capabilities lists what the backend implements. Of the fused operations only the
// attention is (as cuDNN's, attention.go); GoMLX builds the others' decompositions.
func (b *Backend) Capabilities() compute.Capabilities { return capabilities.Clone() }

var capabilities = compute.Capabilities{
	Functions:     true, // closures, for While and Sort
	DynamicShapes: compute.DynamicShapesNone,
	Operations: opSet(
		compute.OpTypeParameter, compute.OpTypeConstant, compute.OpTypeIdentity,
		compute.OpTypeWhile, compute.OpTypeSort,

		compute.OpTypeAbs, compute.OpTypeNeg, compute.OpTypeExp, compute.OpTypeExpm1, compute.OpTypeLog,
		compute.OpTypeLog1p, compute.OpTypeLogistic, compute.OpTypeTanh, compute.OpTypeSqrt, compute.OpTypeRsqrt,
		compute.OpTypeSin, compute.OpTypeCos, compute.OpTypeErf, compute.OpTypeFloor, compute.OpTypeCeil,
		compute.OpTypeRound, compute.OpTypeSign, compute.OpTypeIsFinite, compute.OpTypeIsNaN,
		compute.OpTypeLogicalNot, compute.OpTypeBitwiseNot, compute.OpTypeBitCount, compute.OpTypeClz,

		compute.OpTypeAdd, compute.OpTypeSub, compute.OpTypeMul, compute.OpTypeDiv, compute.OpTypeRem,
		compute.OpTypePow, compute.OpTypeAtan2, compute.OpTypeMax, compute.OpTypeMin,
		compute.OpTypeLogicalAnd, compute.OpTypeLogicalOr, compute.OpTypeLogicalXor,
		compute.OpTypeBitwiseAnd, compute.OpTypeBitwiseOr, compute.OpTypeBitwiseXor,
		compute.OpTypeShiftLeft, compute.OpTypeShiftRightArithmetic, compute.OpTypeShiftRightLogical,

		compute.OpTypeEqual, compute.OpTypeNotEqual, compute.OpTypeGreaterOrEqual, compute.OpTypeGreaterThan,
		compute.OpTypeLessOrEqual, compute.OpTypeLessThan, compute.OpTypeEqualTotalOrder,
		compute.OpTypeNotEqualTotalOrder, compute.OpTypeGreaterOrEqualTotalOrder,
		compute.OpTypeGreaterThanTotalOrder, compute.OpTypeLessOrEqualTotalOrder, compute.OpTypeLessThanTotalOrder,

		compute.OpTypeWhere, compute.OpTypeClamp, compute.OpTypeConvertDType, compute.OpTypeBitcast,
		compute.OpTypeReshape, compute.OpTypeTranspose, compute.OpTypeBroadcastInDim, compute.OpTypeSlice,
		compute.OpTypeReverse, compute.OpTypeConcatenate, compute.OpTypeIota, compute.OpTypeDynamicSlice,
		compute.OpTypeDynamicUpdateSlice, compute.OpTypePad, compute.OpTypeOptimizationBarrier,
		compute.OpTypeRNGBitGenerator,

		compute.OpTypeReduceSum, compute.OpTypeReduceProduct, compute.OpTypeReduceMax, compute.OpTypeReduceMin,
		compute.OpTypeReduceLogicalOr, compute.OpTypeReduceLogicalAnd, compute.OpTypeReduceLogicalXor,
		compute.OpTypeReduceBitwiseOr, compute.OpTypeReduceBitwiseXor, compute.OpTypeReduceBitwiseAnd,
		compute.OpTypeArgMinMax, compute.OpTypeCumSum, compute.OpTypeDotGeneral, compute.OpTypeGather,
		compute.OpTypeScatterSum, compute.OpTypeScatterMax, compute.OpTypeScatterMin,

		compute.OpTypeFusedScaledDotProductAttention,
	),
	DTypes: map[dtypes.DType]bool{
		dtypes.Bool: true,
		dtypes.Int8: true, dtypes.Int16: true, dtypes.Int32: true, dtypes.Int64: true,
		dtypes.Uint8: true, dtypes.Uint16: true, dtypes.Uint32: true, dtypes.Uint64: true,
		dtypes.Float16: true, dtypes.BFloat16: true, dtypes.Float32: true, dtypes.Float64: true,
	},
}

func opSet(ops ...compute.OpType) map[compute.OpType]bool {
	m := make(map[compute.OpType]bool, len(ops))
	for _, op := range ops {
		m[op] = true
	}
	return m
}
