package triton

import (
	"fmt"
	"regexp"
	"strings"
)

// sumParts rewrites a kernel's load of the float32 row operand value so that it reads
// the operand's parts rows, stride elements apart, and sums them left to right: the
// rows of a split kernel's partial sums (GEMVSwiGLUSplitTTIR), read where the sum is
// needed, always in the same order. The load must be one line of text, as
// `%v = tt.load %p : tensor<...x!tt.ptr<f32>>`.
func sumParts(text, value string, parts, stride int) (string, error) {
	load := regexp.MustCompile(`(?m)^(\s*)%` + regexp.QuoteMeta(value) + ` = tt\.load (%\w+) : tensor<([\dx]+)x!tt\.ptr<f32>>\n`)
	m := load.FindStringSubmatch(text)
	if m == nil || len(load.FindAllString(text, -1)) != 1 {
		return "", fmt.Errorf("triton: no single load of %%%s to read in %d parts", value, parts)
	}
	indent, ptr, shape := m[1], m[2], m[3]
	var b strings.Builder
	sum := ""
	for i := range parts {
		part := ptr
		if i > 0 {
			part = fmt.Sprintf("%%%s_p%d", value, i)
			fmt.Fprintf(&b, "%s%%%s_o%d = arith.constant dense<%d> : tensor<%sxi32>\n", indent, value, i, i*stride, shape)
			fmt.Fprintf(&b, "%s%s = tt.addptr %s, %%%s_o%d : tensor<%sx!tt.ptr<f32>>, tensor<%sxi32>\n", indent, part, ptr, value, i, shape, shape)
		}
		v := fmt.Sprintf("%%%s_v%d", value, i)
		fmt.Fprintf(&b, "%s%s = tt.load %s : tensor<%sx!tt.ptr<f32>>\n", indent, v, part, shape)
		switch {
		case i == 0:
			sum = v
		default:
			next := fmt.Sprintf("%%%s_s%d", value, i)
			if i == parts-1 {
				next = "%" + value
			}
			fmt.Fprintf(&b, "%s%s = arith.addf %s, %s : tensor<%sxf32>\n", indent, next, sum, v, shape)
			sum = next
		}
	}
	return strings.Replace(text, m[0], b.String(), 1), nil
}
