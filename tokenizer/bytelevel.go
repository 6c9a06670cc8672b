package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Byte-level BPE (GPT-2 and its descendants, Qwen and MiniCPM5 among them) never sees raw
// bytes: every byte is first replaced by a printable character so that the vocabulary can be
// stored as text. Printable Latin-1 bytes stand for themselves; the remaining 68 bytes
// (controls, space, soft hyphen, ...) are shifted in order to U+0100 and above.

var (
	// byteToChar maps a byte to the character that represents it.
	byteToChar [256]rune
	// byteToString is byteToChar as ready-made strings.
	byteToString [256]string
	// charToByte is the inverse of byteToChar.
	charToByte map[rune]byte
)

func init() {
	charToByte = make(map[rune]byte, 256)
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = next
			next++
		}
		byteToChar[b] = r
		byteToString[b] = string(r)
		charToByte[r] = byte(b)
	}
}

// byteLevelEncode maps every byte of s to its byte-level character.
func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteToString[s[i]])
	}
	return sb.String()
}

// byteLevelTokenBytes appends the bytes a byte-level token stands for. A token that holds a
// character outside the byte alphabet (an added token such as "<|im_end|>" written with a
// space, say) stands for its own UTF-8 text, as in the reference implementation.
func byteLevelTokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := charToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// utf8Lossy decodes b as UTF-8, writing U+FFFD for each maximal invalid subsequence (the
// substitution Unicode recommends, and the one Rust's String::from_utf8_lossy performs).
// When final is false, an incomplete but so far valid sequence at the end of b is not
// decoded; its length is returned in held so the caller can keep it for more bytes.
func utf8Lossy(sb *strings.Builder, b []byte, final bool) (held int) {
	i := 0
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			sb.WriteByte(c)
			i++
			continue
		}
		n, lo, hi := utf8SeqInfo(c)
		if n == 0 {
			sb.WriteString("\uFFFD")
			i++
			continue
		}
		// Walk the continuation bytes.
		j := 1
		for ; j < n; j++ {
			if i+j >= len(b) {
				break
			}
			cb := b[i+j]
			l, h := byte(0x80), byte(0xBF)
			if j == 1 {
				l, h = lo, hi
			}
			if cb < l || cb > h {
				break
			}
		}
		switch {
		case j == n:
			sb.Write(b[i : i+n])
			i += n
		case i+j >= len(b) && !final:
			return len(b) - i
		default:
			// An invalid or truncated sequence: one replacement for the maximal subpart.
			sb.WriteString("\uFFFD")
			i += j
		}
	}
	return 0
}

// utf8SeqInfo returns the length of the sequence that lead byte c starts and the valid range
// of its second byte, or n == 0 when c cannot start a sequence.
func utf8SeqInfo(c byte) (n int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
