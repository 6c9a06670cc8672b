package jinjaguard

import (
	"fmt"
	"strings"
	"unicode"
)

// segKind is the kind of a piece of template source.
type segKind int

const (
	segText    segKind = iota // text between tags
	segComment                // {# ... #}
	segExpr                   // {{ ... }}
	segStmt                   // {% ... %}
)

// segment is one piece of template source, cut as the library's scanner cuts it.
type segment struct {
	kind segKind
	// text is the raw text, or the content of a tag between its delimiters and whitespace
	// modifiers.
	text string
	// The whitespace modifiers: "-" (trim) or "+" (keep) right inside each delimiter.
	left, right byte
	line        int
}

// source rebuilds the tag or text as template source.
func (s segment) source() string {
	if s.kind == segText {
		return s.text
	}
	open, closer := "{{", "}}"
	switch s.kind {
	case segComment:
		open, closer = "{#", "#}"
	case segStmt:
		open, closer = "{%", "%}"
	}
	var sb strings.Builder
	sb.WriteString(open)
	if s.left != 0 {
		sb.WriteByte(s.left)
	}
	sb.WriteString(s.text)
	if s.right != 0 {
		sb.WriteByte(s.right)
	}
	sb.WriteString(closer)
	return sb.String()
}

// scan cuts src into segments exactly as the library does: the same tag openers and
// closers, quotes inside tags, bracket depth for closers, raw blocks. It fails where the
// library fails (an unclosed tag), and when scanning would cost the library more than
// maxScanWork steps (inside a raw block the library looks for "%}" afresh after every
// "{%", which a hostile template makes quadratic).
func scan(src string) ([]segment, error) {
	var segs []segment
	line := 1
	i, textStart, textLine := 0, 0, 1
	raw := false
	work := 0
	advance := func() {
		if src[i] == '\n' {
			line++
		}
		i++
	}
	for i < len(src) {
		if raw {
			end := -1
			if strings.HasPrefix(src[i:], "{%") {
				end = strings.Index(src[i+2:], "%}")
				if end < 0 {
					work += len(src) - i
				} else {
					work += end
				}
				if work > maxScanWork {
					return nil, fmt.Errorf("%w: a raw block would take the template parser more than %d steps", ErrTemplate, maxScanWork)
				}
			}
			if end >= 0 && strings.TrimSpace(strings.Trim(strings.TrimSpace(src[i+2:i+2+end]), "-+")) == "endraw" {
				raw = false
			} else {
				advance()
				continue
			}
		}
		if src[i] != '{' || i+1 >= len(src) {
			advance()
			continue
		}
		var kind segKind
		var closer string
		switch src[i+1] {
		case '{':
			kind, closer = segExpr, "}}"
		case '%':
			kind, closer = segStmt, "%}"
		case '#':
			kind, closer = segComment, "#}"
		default:
			advance()
			continue
		}
		if i > textStart {
			segs = append(segs, segment{kind: segText, text: src[textStart:i], line: textLine})
		}
		tagLine := line
		i += 2
		var left byte
		if i < len(src) && (src[i] == '-' || src[i] == '+') {
			left = src[i]
			i++
		}
		contentStart := i
		depth := 0
		found := false
		for i < len(src) {
			ch := src[i]
			if kind != segComment && (ch == '\'' || ch == '"') {
				advance()
				for i < len(src) && src[i] != ch {
					if src[i] == '\\' && i+1 < len(src) {
						advance()
					}
					advance()
				}
				if i < len(src) {
					i++
				}
				continue
			}
			if depth == 0 && (ch == '-' || ch == '+') && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
				segs = append(segs, segment{kind: kind, text: src[contentStart:i], left: left, right: ch, line: tagLine})
				i += 3
				found = true
				break
			}
			if depth == 0 && i+1 < len(src) && ch == closer[0] && src[i+1] == closer[1] {
				segs = append(segs, segment{kind: kind, text: src[contentStart:i], left: left, line: tagLine})
				i += 2
				found = true
				break
			}
			if kind != segComment {
				switch ch {
				case '(', '[', '{':
					depth++
				case ')', ']', '}':
					depth--
				}
			}
			advance()
		}
		if !found {
			return nil, fmt.Errorf("%w: line %d: unclosed tag", ErrTemplate, tagLine)
		}
		if kind == segStmt && strings.TrimSpace(segs[len(segs)-1].text) == "raw" {
			raw = true
		}
		textStart, textLine = i, line
	}
	if textStart < len(src) {
		segs = append(segs, segment{kind: segText, text: src[textStart:], line: textLine})
	}
	return segs, nil
}

// stmtKeyword is the first word of a statement, as the library reads it.
func stmtKeyword(text string) string {
	text = strings.TrimSpace(text)
	for i, r := range text {
		if !unicode.IsLetter(r) && r != '_' {
			return text[:i]
		}
	}
	return text
}

// trimWork bounds the steps of the library's whitespace trimming of segs: for every tag it
// searches back and forward for the nearest text, and for a block tag also back from
// that text for the nearest text or expression, so runs of adjacent tags cost it the
// square of their length.
func trimWork(segs []segment) int {
	n := len(segs)
	prevText := make([]int, n)     // index of the nearest text at or before i, or -1
	prevTextExpr := make([]int, n) // the same for text or expression
	last, lastTE := -1, -1
	for i, s := range segs {
		if s.kind == segText {
			last = i
		}
		if s.kind == segText || s.kind == segExpr {
			lastTE = i
		}
		prevText[i], prevTextExpr[i] = last, lastTE
	}
	work := 0
	next := n
	for i := n - 1; i >= 0; i-- {
		if segs[i].kind == segText {
			next = i
			continue
		}
		work += next - i
		j := -1
		if i > 0 {
			j = prevText[i-1]
		}
		work += i - j
		if j > 0 {
			work += j - prevTextExpr[j-1]
		} else {
			work++
		}
	}
	return work
}
