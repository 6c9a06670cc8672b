// Package jsondepth measures how deeply the arrays and objects of JSON text nest, in one
// pass over its bytes and without decoding it, so that untrusted JSON is bounded before a
// decoder or a recursive reader meets it.
package jsondepth

// Scan returns the deepest nesting of brackets in data outside JSON strings, and the
// byte offset of the first bracket that nests deeper than limit (-1 when none does).
// Syntax errors are left to the decoder.
func Scan[T ~string | ~[]byte](data T, limit int) (deepest, beyond int) {
	depth, inString := 0, false
	beyond = -1
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
			if depth > limit && beyond < 0 {
				beyond = i
			}
		case ']', '}':
			depth--
		}
	}
	return deepest, beyond
}
