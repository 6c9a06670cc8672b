//go:build cgo && !noxla

package hlo

import (
	"fmt"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
)

// FP8 weights reach the backend as uint8 bytes that the graph decodes itself: neither
// GoMLX nor go-xla has a float8 dtype (package quant's FP8Linear, with its default
// table decoder: a Gather from a 256-entry constant of each byte's E4M3FN value in
// bfloat16, indexed by the bytes). XLA then writes the decoded bfloat16 weight out and
// reads it back for every product, 5 bytes of traffic a weight instead of the byte the
// checkpoint holds. Package quant names that decoder's output (kernels.E4M3Decoded):
// with tritonGEMV, a product of up to 32 rows whose weight is so decoded runs
// our GEMV on the bytes themselves (e4m3Bytes, tritonGEMV), which reads each as its
// E4M3FN value; the Gather is then left unused, for XLA to remove. Where
// the input is a W8A8 layer's, quantized to bytes the same table decodes, a product of
// 2 to 8 rows multiplies both as FP8 on the tensor cores (w8a8Tile). Products of 2 to
// 32 rows run on tensor-core tiles fitted to the weight's shape (fitDotTile) and split
// their K loop over more programs (splitK), since their weights have too few tiles to
// fill the GPU's SMs. Past 32 rows, XLA's own GEMM reads the bytes, converted as
// StableHLO's f8E4M3FN values (fp8BytesProduct, e4m3Values).

// e4m3Bytes returns the uint8 bytes whose E4M3FN values w, bfloat16, holds (a
// kernels.E4M3Decoded: package quant's table decoder); nil for any other value.
func e4m3Bytes(w compute.Value) *value {
	v, ok := w.(*value)
	if !ok || v.shape.DType != dtypes.BFloat16 {
		return nil
	}
	return originOf(v).e4m3
}

// normalisedProduct returns, with tritonFold, a kernels.FP8Dense of one row
// whose input is a kernels.NormalisedRow as one Triton kernel (triton.Kernels.GEMVNorm
// with the norm before the product): the norm, the product of the bytes and the scale
// in one kernel. The norm's own operations and the product are left for XLA to
// remove. ok is false, with nothing added, where the kernel does not take it.
func (f *Function) normalisedProduct(r *fp8Dense) (v compute.Value, ok bool, err error) {
	c, ok := f.foldCandidate(r.product, nil)
	if !ok || e4m3Bytes(c.product.origin.w) == nil {
		return nil, false, nil
	}
	row := normalisedInput(c.product)
	if row == nil {
		return nil, false, nil
	}
	c.scale = r.scale
	out, err := f.gemvNorm(c, row.x, row.gain, row.norm)
	return out, true, err
}

// normalisedInput is the norm (Before: 1/rms scales x before the product) of a dense
// product's input where it is a kernels.NormalisedRow our kernels compute: bfloat16
// rows of a bfloat16 norm weight; nil otherwise.
func normalisedInput(product *value) *normalisedRow {
	x := originOf(product).x
	row := originOf(x).row
	if row == nil || x.shape.DType != dtypes.BFloat16 || row.gain.shape.DType != dtypes.BFloat16 {
		return nil
	}
	before := *row
	before.norm.Before = true
	return &before
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
