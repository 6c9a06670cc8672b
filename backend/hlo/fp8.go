//go:build cgo && !noxla

package hlo

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// FP8 weights reach the backend as uint8 bytes that the graph decodes itself: neither
// GoMLX nor go-xla has a float8 dtype (package quant's FP8Linear, with its default
// table decoder: a Gather from a 256-entry constant of each byte's E4M3FN value in
// bfloat16, indexed by the bytes). XLA then writes the decoded bfloat16 weight out and
// reads it back for every product, 5 bytes of traffic a weight instead of the byte the
// checkpoint holds. With option triton=gemv, a product of up to 32 rows whose weight is
// so decoded runs our GEMV on the bytes themselves (e4m3Bytes, tritonGEMV), which reads
// each as its E4M3FN value; the Gather is then left unused, for XLA to remove. Where
// the input is a W8A8 layer's, quantized to bytes the same table decodes, a product of
// 2 to 8 rows multiplies both as FP8 on the tensor cores (w8a8Tile). Products of 2 to
// 32 rows run on tensor-core tiles fitted to the weight's shape (fitDotTile) and split
// their K loop over more programs (splitK), since their weights have too few tiles to
// fill the GPU's SMs. Past 32 rows, XLA's own GEMM reads the bytes, converted as
// StableHLO's f8E4M3FN values (fp8BytesProduct, e4m3Values).

// e4m3TableSize is the entries of a decoding table: one per byte.
const e4m3TableSize = 256

// isE4M3Table reports whether flat, a constant's values, is the table of each byte's
// E4M3FN value as bfloat16 bits (uint16), as package quant's decoder builds it.
func isE4M3Table(flat any) bool {
	table, ok := flat.([]uint16)
	if !ok || len(table) != e4m3TableSize {
		return false
	}
	for b, bits := range table {
		if bits != e4m3BFloat16Bits(uint8(b)) {
			return false
		}
	}
	return true
}

// e4m3BFloat16Bits is the bfloat16 bits of FP8 E4M3FN byte b (1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits; exponent 0 subnormal; 0x7f and 0xff a quiet NaN
// of b's sign), exact: every E4M3FN value fits bfloat16.
func e4m3BFloat16Bits(b uint8) uint16 {
	sign := uint16(b>>7) << 15
	exponent, mantissa := int(b>>3&0xf), float64(b&7)
	if b&0x7f == 0x7f {
		return sign | 0x7fc0
	}
	value := math.Ldexp(mantissa, -9) // subnormal: mantissa × 2^-6 / 8
	if exponent > 0 {
		value = math.Ldexp(8+mantissa, exponent-10) // (1 + mantissa/8) × 2^(exponent-7)
	}
	return sign | uint16(math.Float32bits(float32(value))>>16)
}

// e4m3Bytes returns the uint8 bytes that w decodes, where w is the Gather of package
// quant's table decoder: Gather(Bitcast(table, bfloat16), Reshape(ConvertDType(bytes,
// int32))) with bytes of w's shape, one index per element; nil for any other value.
func e4m3Bytes(w compute.Value) *value {
	v, ok := w.(*value)
	if !ok || opOf(v) != compute.OpTypeGather || v.shape.DType != dtypes.BFloat16 {
		return nil
	}
	return v.origin.e4m3
}

// recordE4M3Gather notes on out, a Gather of operand at indices with its axes, the
// bytes it decodes when it is package quant's table decoder (e4m3Bytes).
func (f *Function) recordE4M3Gather(out, operand, indices compute.Value, indexVectorAxis int,
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int) {
	o, ok1 := out.(*value)
	table, ok2 := operand.(*value)
	index, ok3 := indices.(*value)
	if !f.builder.backend.recordsOrigins() || !ok1 || !ok2 || !ok3 || opOf(table) != compute.OpTypeBitcast ||
		table.shape.DType != dtypes.BFloat16 || !table.origin.args[0].isE4M3TableConstant() ||
		indexVectorAxis != index.shape.Rank()-1 || len(offsetOutputAxes) != 0 || !slices.Equal(collapsedSliceAxes, []int{0}) ||
		!slices.Equal(startIndexMap, []int{0}) || !slices.Equal(sliceSizes, []int{1}) || opOf(index) != compute.OpTypeReshape {
		return
	}
	converted := index.origin.args[0]
	if opOf(converted) != compute.OpTypeConvertDType {
		return
	}
	bytes := converted.origin.args[0]
	if bytes.shape.DType != dtypes.Uint8 || !slices.Equal(bytes.shape.Dimensions, o.shape.Dimensions) {
		return
	}
	o.origin = &origin{op: compute.OpTypeGather, args: []*value{table, index}, e4m3: bytes}
}

// isE4M3TableConstant reports whether v is a constant whose values isE4M3Table
// recognised.
func (v *value) isE4M3TableConstant() bool {
	return v != nil && v.origin != nil && v.origin.op == compute.OpTypeConstant && v.origin.e4m3Table
}

// recordConstant notes on out, a constant of flat's values, a float32 or int32
// scalar's value (fold.go's recognisers read it) and whether it is an E4M3FN decoding
// table.
func (f *Function) recordConstant(out *value, flat any) {
	if !f.builder.backend.recordsOrigins() {
		return
	}
	fv := reflect.ValueOf(flat)
	dtype := out.shape.DType
	switch {
	case fv.Len() == 1 && (dtype == dtypes.Float32 || dtype == dtypes.Int32):
		scalar := fv.Index(0).Convert(reflect.TypeFor[float64]()).Float()
		out.origin = &origin{op: compute.OpTypeConstant, scalar: &scalar}
	case isE4M3Table(flat):
		out.origin = &origin{op: compute.OpTypeConstant, e4m3Table: true}
	}
}

// scaledProductOf recognises package quant's FP8 layer after its product
// (FP8Linear.ApplyFloat32): a dense product (denseProduct) of FP8 bytes that e4m3Bytes
// found decoded, through a conversion to float32, times its scale (fp8ScaleOf), either
// way round. It returns the product and the scale.
func scaledProductOf(v *value) (product, scale *value, ok bool) {
	if opOf(v) != compute.OpTypeMul {
		return nil, nil, false
	}
	for i, p := range v.origin.args {
		if opOf(p) == compute.OpTypeConvertDType && p.shape.DType == dtypes.Float32 {
			p = p.origin.args[0]
		}
		if !p.shape.Equal(v.shape) {
			continue
		}
		if s, ok := fp8ScaleOf(p, v.origin.args[1-i]); ok {
			return p, s, true
		}
	}
	return nil, nil, false
}

// fp8ScaleOf returns the scale that other is of product, a dense product (denseProduct)
// of FP8 bytes: float32 [N] behind reshapes and broadcasts, or a scalar (a per-tensor
// scale).
func fp8ScaleOf(product, other *value) (scale *value, ok bool) {
	if opOf(product) != compute.OpTypeDotGeneral || product.origin.w == nil || e4m3Bytes(product.origin.w) == nil {
		return nil, false
	}
	s := throughShape(other)
	n := product.origin.w.shape.Dimensions[0]
	return s, s.shape.DType == dtypes.Float32 && (s.shape.Size() == 1 || slices.Equal(s.shape.Dimensions, []int{n}))
}

// normalisedRowOf recognises model's rmsNorm(x, g) of a quantized layer's input
// (model/forward.go): normWeighted(ConvertDType(x·invRMS(x), bfloat16), g), and returns
// x, g and the norm (Before: 1/rms scales x before the product).
func normalisedRowOf(v *value) (x, g *value, norm triton.Norm, ok bool) {
	if opOf(v) != compute.OpTypeMul {
		return nil, nil, norm, false
	}
	for _, rounded := range v.origin.args {
		if opOf(rounded) != compute.OpTypeConvertDType || opOf(rounded.origin.args[0]) != compute.OpTypeMul {
			continue
		}
		m := rounded.origin.args[0]
		for i, inv := range m.origin.args {
			x, norm, ok = invRMSOf(inv)
			if !ok || x != m.origin.args[1-i] {
				continue
			}
			if g, ok = normWeightedOf(v, m); ok {
				norm.Before = true
				return x, g, norm, true
			}
		}
	}
	return nil, nil, norm, false
}

// normalisedProduct returns, with option triton=fold, lhs·rhs as one Triton kernel
// (triton.Kernels.GEMVNorm with the norm before the product) when it is package quant's
// FP8 layer of one row, its product times its scale either way round, whose input is
// its normalised row (normalisedRowOf): the norm, the product of the bytes and the
// scale in one kernel. The norm's own operations and the product are left for XLA to
// remove. ok is false, with nothing added, for every other product.
func (f *Function) normalisedProduct(lhs, rhs compute.Value) (v compute.Value, ok bool, err error) {
	for _, c := range f.foldCandidates(lhs, rhs) {
		scale, ok := fp8ScaleOf(c.product, c.other)
		if !ok || c.scale != nil {
			continue
		}
		x, g, norm, ok := normalisedRowOf(c.product.origin.x)
		if !ok || x.shape.DType != dtypes.Float32 {
			continue
		}
		c.scale = scale
		out, err := f.gemvNorm(c, x, g, norm)
		return out, true, err
	}
	return nil, false, nil
}

// e4m3Values returns FP8 E4M3FN bytes as values of dtype through StableHLO's own
// f8E4M3FN type: bitcast_convert to it, then convert, which XLA fuses into the GEMM
// reading them. go-xla writes no float8 type (its dtype table stops at 16 bits), so the
// bitcast goes to int8 and Builder.Compile retypes it in the module's text
// (retypeE4M3).
func (f *Function) e4m3Values(bytes *stablehlo.Value, dtype dtypes.DType) (*stablehlo.Value, error) {
	i8, err := stablehlo.BitcastConvert(bytes, dtypes.Int8)
	if err != nil {
		return nil, err
	}
	f.builder.e4m3 = append(f.builder.e4m3, i8.String())
	return stablehlo.Convert(i8, dtype)
}

// retypeE4M3 returns the module text with the int8 values that e4m3Values made, named
// by names, retyped to f8E4M3FN: each one's bitcast_convert and the convert reading it.
// One pass over the text's lines (a decoder's program holds hundreds of such values in
// tens of thousands of lines).
func retypeE4M3(text []byte, names []string) ([]byte, error) {
	if len(names) == 0 {
		return text, nil
	}
	defs, converts := make(map[string]int, len(names)), make(map[string]int, len(names))
	for _, name := range names {
		defs[name] = 0
	}
	const bitcast, convert = ` = "stablehlo.bitcast_convert"(`, `"stablehlo.convert"(`
	lines := strings.Split(string(text), "\n")
	for i, line := range lines {
		if def, _, ok := strings.Cut(strings.TrimSpace(line), bitcast); ok && strings.HasSuffix(line, "xi8>") {
			if _, ours := defs[def]; ours {
				lines[i] = strings.TrimSuffix(line, "xi8>") + "xf8E4M3FN>"
				defs[def]++
			}
			continue
		}
		if _, rest, ok := strings.Cut(line, convert); ok && strings.Contains(line, "xi8>)") {
			operand, _, _ := strings.Cut(rest, ")")
			if _, ours := defs[operand]; ours {
				lines[i] = strings.Replace(line, "xi8>)", "xf8E4M3FN>)", 1)
				converts[operand]++
			}
		}
	}
	for _, name := range names {
		if defs[name] != 1 || converts[name] != 1 {
			return nil, fmt.Errorf("hlo: retyping %s to f8E4M3FN: %d definitions and %d conversions, want one each", name, defs[name], converts[name])
		}
	}
	return []byte(strings.Join(lines, "\n")), nil
}
