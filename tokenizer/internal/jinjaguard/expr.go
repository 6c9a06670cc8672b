package jinjaguard

import (
	"fmt"
	"strconv"
	"strings"
)

// The expression grammar below mirrors the library's parser rule for rule (precedence,
// optional commas, how unary signs bind before filters, which tokens a bare test argument
// may start with), so that a template parses here exactly when it parses there and into
// the same tree. The tests check this by rendering templates before and after rewriting.

type tokKind int

const (
	tName tokKind = iota + 1
	tInt
	tFloat
	tString
	tOp
	tComma
	tDot
	tColon
	tLParen
	tRParen
	tLBracket
	tRBracket
	tLBrace
	tRBrace
	tPipe
	tTilde
	tPower
	tFloorDiv
	tEOF
)

type token struct {
	kind       tokKind
	val        string // the token's source text (for a string, with its quotes)
	start, end int    // byte offsets in the expression source
}

// tokenize cuts s into tokens as the library does; characters it does not know are
// skipped, as there.
func tokenize(s string) []token {
	var toks []token
	add := func(k tokKind, start, end int) {
		toks = append(toks, token{kind: k, val: s[start:end], start: start, end: end})
	}
	for i := 0; i < len(s); {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			i++
			continue
		case ch == '\'' || ch == '"':
			start := i
			i++
			for i < len(s) && s[i] != ch {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				i++
			}
			if i < len(s) {
				i++
			}
			add(tString, start, i)
			continue
		case ch >= '0' && ch <= '9':
			start := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			isFloat := false
			if i+1 < len(s) && s[i] == '.' && s[i+1] >= '0' && s[i+1] <= '9' && (len(toks) == 0 || toks[len(toks)-1].kind != tDot) {
				isFloat = true
				i++
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					i++
				}
			}
			if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
				isFloat = true
				i++
				if i < len(s) && (s[i] == '+' || s[i] == '-') {
					i++
				}
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					i++
				}
			}
			if isFloat {
				add(tFloat, start, i)
			} else {
				add(tInt, start, i)
			}
			continue
		case ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			add(tName, start, i)
			continue
		}
		if i+1 < len(s) {
			switch s[i : i+2] {
			case "**":
				add(tPower, i, i+2)
				i += 2
				continue
			case "//":
				add(tFloorDiv, i, i+2)
				i += 2
				continue
			case "==", "!=", "<=", ">=":
				add(tOp, i, i+2)
				i += 2
				continue
			}
		}
		if k := punctKinds[ch]; k != 0 {
			add(k, i, i+1)
		} else if strings.IndexByte("+-*/%<>=", ch) >= 0 {
			add(tOp, i, i+1)
		}
		i++
	}
	toks = append(toks, token{kind: tEOF, start: len(s), end: len(s)})
	return toks
}

// punctKinds maps the single-character punctuation tokens to their kinds (0: none).
var punctKinds = [256]tokKind{',': tComma, '.': tDot, ':': tColon, '(': tLParen, ')': tRParen, '[': tLBracket,
	']': tRBracket, '{': tLBrace, '}': tRBrace, '|': tPipe, '~': tTilde}

func isIdentChar(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_'
}

// exprKind is the kind of an expression node.
type exprKind int

const (
	eLit     exprKind = iota // literal: text holds its source
	eName                    // variable: text holds the name
	eAttr                    // sub[0].text
	eItem                    // sub[0][sub[1]]
	eSlice                   // sub[0][sub[1]:sub[2]:sub[3]], missing parts nil
	eUnary                   // text sub[0], text "not", "-" or "+"
	eBinary                  // sub[0] text sub[1]
	eCompare                 // sub[0] ops[0] sub[1] ops[1] sub[2] ...
	eCond                    // sub[0] if sub[1] else sub[2] (sub[2] may be nil)
	eCall                    // sub[0](sub[1:]..., kw...)
	eFilter                  // sub[0]|text(sub[1:]..., kw...)
	eTest                    // sub[0] is [not] text(sub[1:]...)
	eList                    // [sub...] or, with tuple, (sub...)
	eDict                    // {sub[0]: sub[1], sub[2]: sub[3], ...}
)

// expr is a node of an expression tree.
type expr struct {
	kind    exprKind
	text    string
	sub     []*expr
	ops     []string // eCompare
	kw      []kwarg  // eCall, eFilter
	negated bool     // eTest
	tuple   bool     // eList
}

// kwarg is a keyword argument; an empty name stands for **mapping.
type kwarg struct {
	name  string
	value *expr
}

// walk calls fn for e and every node below it.
func (e *expr) walk(fn func(*expr)) {
	if e == nil {
		return
	}
	fn(e)
	for _, s := range e.sub {
		s.walk(fn)
	}
	for _, k := range e.kw {
		k.value.walk(fn)
	}
}

type parser struct {
	toks  []token
	pos   int
	depth int
}

func (p *parser) peek() token {
	if p.pos >= len(p.toks) {
		return token{kind: tEOF}
	}
	return p.toks[p.pos]
}

func (p *parser) advance() token {
	t := p.peek()
	p.pos++
	return t
}

func (p *parser) expect(k tokKind, what string) (token, error) {
	t := p.advance()
	if t.kind != k {
		return t, fmt.Errorf("expected %s but got %q", what, t.val)
	}
	return t, nil
}

func (p *parser) isName(name string) bool {
	t := p.peek()
	return t.kind == tName && t.val == name
}

func (p *parser) matchName(name string) bool {
	if p.isName(name) {
		p.advance()
		return true
	}
	return false
}

// enter counts one level of nesting; the tree's depth bounds the library's recursion
// when it parses and evaluates the expression.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return fmt.Errorf("%w: an expression nests deeper than %d levels", ErrTemplate, maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseExpr parses the source of an expression as the library's parseExpr does.
func parseExpr(s string) (*expr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return &expr{kind: eLit, text: "none"}, nil
	}
	p := &parser{toks: tokenize(s)}
	e, err := p.parseExpression()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tEOF {
		return nil, fmt.Errorf("unexpected token %q after expression", p.peek().val)
	}
	return e, nil
}

func (p *parser) parseExpression() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.advance()
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var alt *expr
		if p.matchName("else") {
			if alt, err = p.parseExpression(); err != nil {
				return nil, err
			}
		}
		return &expr{kind: eCond, sub: []*expr{e, cond, alt}}, nil
	}
	return e, nil
}

// parseLeftAssoc parses operands joined by the operators that match reports.
func (p *parser) parseLeftAssoc(operand func() (*expr, error), match func(token) (string, bool)) (*expr, error) {
	left, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := match(p.peek())
		if !ok {
			return left, nil
		}
		p.advance()
		right, err := operand()
		if err != nil {
			return nil, err
		}
		left = &expr{kind: eBinary, text: op, sub: []*expr{left, right}}
		// A long chain nests to the left; the library evaluates it recursively.
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
	}
}

func (p *parser) parseOr() (*expr, error) {
	return p.parseLeftAssoc(p.parseAnd, func(t token) (string, bool) { return "or", t.kind == tName && t.val == "or" })
}

func (p *parser) parseAnd() (*expr, error) {
	return p.parseLeftAssoc(p.parseNot, func(t token) (string, bool) { return "and", t.kind == tName && t.val == "and" })
}

func (p *parser) parseNot() (*expr, error) {
	if p.isName("not") {
		p.advance()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		operand, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &expr{kind: eUnary, text: "not", sub: []*expr{operand}}, nil
	}
	return p.parseComparison()
}

func (p *parser) parseComparison() (*expr, error) {
	left, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	chain := &expr{kind: eCompare, sub: []*expr{left}}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.advance()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.advance()
		case t.kind == tName && t.val == "not" && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tName && p.toks[p.pos+1].val == "in":
			op = "not in"
			p.advance()
			p.advance()
		}
		if op == "" {
			break
		}
		right, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		chain.ops = append(chain.ops, op)
		chain.sub = append(chain.sub, right)
	}
	switch len(chain.ops) {
	case 0:
		return left, nil
	case 1:
		return &expr{kind: eBinary, text: chain.ops[0], sub: chain.sub}, nil
	}
	return chain, nil
}

func (p *parser) parseConcat() (*expr, error) {
	return p.parseLeftAssoc(p.parseAddSub, func(t token) (string, bool) { return "~", t.kind == tTilde })
}

func (p *parser) parseAddSub() (*expr, error) {
	return p.parseLeftAssoc(p.parseMulDiv, func(t token) (string, bool) {
		return t.val, t.kind == tOp && (t.val == "+" || t.val == "-")
	})
}

func (p *parser) parseMulDiv() (*expr, error) {
	return p.parseLeftAssoc(p.parsePower, func(t token) (string, bool) {
		if t.kind == tFloorDiv {
			return "//", true
		}
		return t.val, t.kind == tOp && (t.val == "*" || t.val == "/" || t.val == "%")
	})
}

func (p *parser) parsePower() (*expr, error) {
	return p.parseLeftAssoc(p.parseUnary, func(t token) (string, bool) { return "**", t.kind == tPower })
}

func (p *parser) parseUnary() (*expr, error) {
	if t := p.peek(); t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.advance()
		op := t.val
		if n := p.peek(); op == "-" && n.kind == tInt && n.val == "9223372036854775808" {
			p.advance()
			return p.parsePostfix(&expr{kind: eLit, text: "-9223372036854775808"}, true)
		}
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		operand, err := p.parseUnaryOperand()
		if err != nil {
			return nil, err
		}
		// The library folds a sign into a numeric literal.
		if operand.kind == eLit && isNumberLiteral(operand.text) {
			return p.parsePostfix(&expr{kind: eLit, text: op + operand.text}, true)
		}
		return p.parsePostfix(&expr{kind: eUnary, text: op, sub: []*expr{operand}}, true)
	}
	e, err := p.parseAtom()
	if err != nil {
		return nil, err
	}
	return p.parsePostfix(e, true)
}

// isNumberLiteral reports whether a literal's text is an int or float.
func isNumberLiteral(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && s[0] >= '0' && s[0] <= '9'
}

// parseUnaryOperand parses the operand of a sign: signs bind before filters.
func (p *parser) parseUnaryOperand() (*expr, error) {
	if t := p.peek(); t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.advance()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		operand, err := p.parseUnaryOperand()
		if err != nil {
			return nil, err
		}
		return &expr{kind: eUnary, text: t.val, sub: []*expr{operand}}, nil
	}
	e, err := p.parseAtom()
	if err != nil {
		return nil, err
	}
	return p.parsePostfix(e, false)
}

func (p *parser) parsePostfix(e *expr, filters bool) (*expr, error) {
	for steps := 0; ; steps++ {
		// A postfix chain nests to the left; the library evaluates it recursively.
		if steps > 0 {
			if err := p.enter(); err != nil {
				return nil, err
			}
			defer p.leave()
		}
		t := p.peek()
		switch {
		case t.kind == tDot:
			p.advance()
			attr := p.advance()
			if attr.kind != tName && attr.kind != tInt {
				return nil, fmt.Errorf("expected attribute name after '.', got %q", attr.val)
			}
			e = &expr{kind: eAttr, text: attr.val, sub: []*expr{e}}
			if p.peek().kind == tLParen {
				p.advance()
				args, kw, err := p.parseCallArgs()
				if err != nil {
					return nil, err
				}
				e = &expr{kind: eCall, sub: append([]*expr{e}, args...), kw: kw}
			}
		case t.kind == tLBracket:
			p.advance()
			var start, stop, step *expr
			var err error
			isSlice := p.peek().kind == tColon
			if !isSlice {
				if start, err = p.parseExpression(); err != nil {
					return nil, err
				}
				isSlice = p.peek().kind == tColon
			}
			if isSlice {
				if p.peek().kind == tColon {
					p.advance()
				}
				if k := p.peek().kind; k != tRBracket && k != tColon {
					if stop, err = p.parseExpression(); err != nil {
						return nil, err
					}
				}
				if p.peek().kind == tColon {
					p.advance()
					if p.peek().kind != tRBracket {
						if step, err = p.parseExpression(); err != nil {
							return nil, err
						}
					}
				}
				if _, err := p.expect(tRBracket, "]"); err != nil {
					return nil, err
				}
				e = &expr{kind: eSlice, sub: []*expr{e, start, stop, step}}
			} else {
				if _, err := p.expect(tRBracket, "]"); err != nil {
					return nil, err
				}
				e = &expr{kind: eItem, sub: []*expr{e, start}}
			}
		case t.kind == tLParen:
			p.advance()
			args, kw, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			e = &expr{kind: eCall, sub: append([]*expr{e}, args...), kw: kw}
		case filters && t.kind == tPipe:
			p.advance()
			name := p.advance()
			if name.kind != tName {
				return nil, fmt.Errorf("expected filter name after '|', got %q", name.val)
			}
			f := &expr{kind: eFilter, text: name.val, sub: []*expr{e}}
			if p.peek().kind == tLParen {
				p.advance()
				args, kw, err := p.parseCallArgs()
				if err != nil {
					return nil, err
				}
				f.sub, f.kw = append(f.sub, args...), kw
			}
			e = f
		case filters && p.isName("is"):
			p.advance()
			negated := p.matchName("not")
			name, err := p.expect(tName, "a test name")
			if err != nil {
				return nil, err
			}
			test := &expr{kind: eTest, text: name.val, negated: negated, sub: []*expr{e}}
			n := p.peek()
			if n.kind == tLParen {
				p.advance()
				// The library drops keyword arguments of tests unevaluated.
				args, _, err := p.parseCallArgs()
				if err != nil {
					return nil, err
				}
				test.sub = append(test.sub, args...)
			} else if n.kind == tInt || n.kind == tString || (n.kind == tName && n.val != "and" && n.val != "or" && n.val != "else" && n.val != "if" && n.val != "in") {
				arg, err := p.parseUnaryOperand()
				if err != nil {
					return nil, err
				}
				test.sub = append(test.sub, arg)
			}
			e = test
		default:
			return e, nil
		}
	}
}

func (p *parser) parseAtom() (*expr, error) {
	t := p.peek()
	switch t.kind {
	case tName:
		p.advance()
		switch t.val {
		case "None", "none", "null", "True", "true", "False", "false":
			return &expr{kind: eLit, text: t.val}, nil
		}
		return &expr{kind: eName, text: t.val}, nil
	case tInt:
		p.advance()
		if _, err := strconv.ParseInt(t.val, 10, 64); err != nil {
			return nil, fmt.Errorf("invalid integer %q", t.val)
		}
		return &expr{kind: eLit, text: t.val}, nil
	case tFloat:
		p.advance()
		if _, err := strconv.ParseFloat(t.val, 64); err != nil {
			return nil, fmt.Errorf("invalid float %q", t.val)
		}
		return &expr{kind: eLit, text: t.val}, nil
	case tString:
		p.advance()
		parts := []string{t.val}
		for p.peek().kind == tString {
			parts = append(parts, p.advance().val)
		}
		return &expr{kind: eLit, text: strings.Join(parts, " ")}, nil
	case tLParen:
		p.advance()
		if p.peek().kind == tRParen {
			p.advance()
			return &expr{kind: eList, tuple: true}, nil
		}
		e, err := p.parseExpression()
		if err != nil {
			return nil, err
		}
		if p.peek().kind == tComma {
			items := []*expr{e}
			for p.peek().kind == tComma {
				p.advance()
				if p.peek().kind == tRParen {
					break
				}
				item, err := p.parseExpression()
				if err != nil {
					return nil, err
				}
				items = append(items, item)
			}
			if _, err := p.expect(tRParen, ")"); err != nil {
				return nil, err
			}
			return &expr{kind: eList, tuple: true, sub: items}, nil
		}
		if _, err := p.expect(tRParen, ")"); err != nil {
			return nil, err
		}
		return e, nil
	case tLBracket:
		p.advance()
		var items []*expr
		for k := p.peek().kind; k != tRBracket && k != tEOF; k = p.peek().kind {
			item, err := p.parseExpression()
			if err != nil {
				return nil, err
			}
			items = append(items, item)
			if p.peek().kind == tComma {
				p.advance()
			}
		}
		if _, err := p.expect(tRBracket, "]"); err != nil {
			return nil, err
		}
		return &expr{kind: eList, sub: items}, nil
	case tLBrace:
		p.advance()
		var pairs []*expr
		for k := p.peek().kind; k != tRBrace && k != tEOF; k = p.peek().kind {
			key, err := p.parseExpression()
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(tColon, ":"); err != nil {
				return nil, err
			}
			value, err := p.parseExpression()
			if err != nil {
				return nil, err
			}
			pairs = append(pairs, key, value)
			if p.peek().kind == tComma {
				p.advance()
			}
		}
		if _, err := p.expect(tRBrace, "}"); err != nil {
			return nil, err
		}
		return &expr{kind: eDict, sub: pairs}, nil
	case tOp:
		if t.val == "-" {
			p.advance()
			if err := p.enter(); err != nil {
				return nil, err
			}
			defer p.leave()
			operand, err := p.parseAtom()
			if err != nil {
				return nil, err
			}
			return &expr{kind: eUnary, text: "-", sub: []*expr{operand}}, nil
		}
	}
	return nil, fmt.Errorf("unexpected token %q", t.val)
}

func (p *parser) parseCallArgs() ([]*expr, []kwarg, error) {
	var args []*expr
	var kw []kwarg
	for k := p.peek().kind; k != tRParen && k != tEOF; k = p.peek().kind {
		switch {
		case k == tPower:
			p.advance()
			v, err := p.parseExpression()
			if err != nil {
				return nil, nil, err
			}
			kw = append(kw, kwarg{value: v})
		case k == tName && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tOp && p.toks[p.pos+1].val == "=":
			name := p.advance().val
			p.advance()
			v, err := p.parseExpression()
			if err != nil {
				return nil, nil, err
			}
			kw = append(kw, kwarg{name: name, value: v})
		default:
			v, err := p.parseExpression()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		if p.peek().kind == tComma {
			p.advance()
		}
	}
	if _, err := p.expect(tRParen, ")"); err != nil {
		return nil, nil, err
	}
	return args, kw, nil
}
