package jinjaguard

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrTemplate is wrapped by the errors of Compile for templates it refuses because of their
// size or shape; syntax errors are reported as the library reports them.
var ErrTemplate = errors.New("jinjaguard: template refused")

// Limits on the template itself. They are fixed because they protect the library's compile
// step, which runs once per template.
const (
	// maxTemplateBytes bounds the source (real chat templates are a few to a few dozen KB).
	maxTemplateBytes = 1 << 20
	// maxNesting bounds the depth of expressions and of nested statements, which the
	// library parses and evaluates recursively.
	maxNesting = 200
	// maxSegments bounds the number of tags and texts after rewriting.
	maxSegments = 1 << 17
	// maxScanWork and maxTrimWork bound the steps of the library's scanner in raw blocks and
	// of its whitespace trimming, both quadratic in the worst case.
	maxScanWork = 1 << 26
	maxTrimWork = 1 << 26
	// maxConstBytes bounds the value of a constant expression that must stay unguarded (see
	// emitSlice).
	maxConstBytes = 1 << 20
)

// reservedPrefix starts the names of the hooks. A template that uses it could replace a
// hook with a macro of its own, so templates containing it are refused.
const reservedPrefix = "__bd_"

// The hooks the rewritten template calls; Render binds them to the budget.
const (
	hookOperand = reservedPrefix + "o"       // (v): an operand of an operation whose cost grows with it
	hookResult  = reservedPrefix + "r"       // (v): a value an operation created
	hookOutput  = reservedPrefix + "out"     // (v): a value about to be written out
	hookIter    = reservedPrefix + "iter"    // (v): the iterable of a for loop
	hookTick    = reservedPrefix + "tick"    // (loop, n): one loop iteration writing up to n bytes of text
	hookEnter   = reservedPrefix + "enter"   // (n): a macro or caller body begins, writing up to n bytes of text
	hookLeave   = reservedPrefix + "leave"   // (): it ends
	hookPre     = reservedPrefix + "pre"     // filter (v, site, args...): checks a filter's input and arguments
	hookPreM    = reservedPrefix + "prem"    // (site, receiver, args...): the same for a method call
	hookArg     = reservedPrefix + "arg"     // (i): argument i of the last pre hook
	hookArgLast = reservedPrefix + "argl"    // (i): the same, and the last one read
	hookFormat  = reservedPrefix + "fmt"     // (v): the left operand of %
	hookCallee  = reservedPrefix + "fn"      // (v, name): a value about to be called
	hookCallOut = reservedPrefix + "callout" // (v): the callee of a call block, whose result is written out
	hookFBOut   = reservedPrefix + "fbout"   // filter (v): the result of a filter block, written out
	hookRecv    = reservedPrefix + "recv"    // (v): the receiver of a method that may change it
	hookMut     = reservedPrefix + "mut"     // (ns, v): v is about to be set as an attribute of ns
)

// mutators are the methods of lists and dicts that change their receiver.
var mutators = map[string]bool{"append": true, "pop": true, "insert": true, "update": true}

// site describes a filter or method call whose arguments a pre hook checks.
type site struct {
	method bool
	name   string
	nargs  int      // positional arguments
	kw     []string // keyword arguments after them, "" for **mapping
}

// typeTests are the tests whose cost does not depend on the size of their operands.
var typeTests = map[string]bool{
	"defined": true, "undefined": true, "none": true, "boolean": true, "integer": true, "float": true,
	"number": true, "string": true, "mapping": true, "iterable": true, "sequence": true, "callable": true,
	"true": true, "false": true, "odd": true, "even": true, "divisibleby": true, "sameas": true,
	"upper": true, "lower": true,
}

// instrumenter rewrites the segments of a template.
type instrumenter struct {
	segs  []segment
	pos   int
	out   []segment
	sites []site
	depth int
	// text counts the bytes of literal text in the body being read: the most it can write
	// each time it runs.
	text *int
	// plain turns off the hooks while emitting a constant expression (see emitSlice).
	plain bool
	err   error // the first error found while emitting
}

// instrument parses src and returns the rewritten source, the pre-hook sites and the
// text the template writes outside any loop, macro or call block.
func instrument(src string) (string, []site, int, error) {
	if len(src) > maxTemplateBytes {
		return "", nil, 0, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrTemplate, len(src), maxTemplateBytes)
	}
	if strings.Contains(src, reservedPrefix) {
		return "", nil, 0, fmt.Errorf("%w: it contains the reserved text %q", ErrTemplate, reservedPrefix)
	}
	segs, err := scan(src)
	if err != nil {
		return "", nil, 0, err
	}
	top := 0
	in := &instrumenter{segs: segs, text: &top}
	if err := in.parseUntil(false, ""); err != nil {
		return "", nil, 0, err
	}
	if in.err != nil {
		return "", nil, 0, in.err
	}
	// The library stops reading at a statement without a keyword; so does the rewriter,
	// and the rest is kept as it is, unread by either.
	in.out = append(in.out, in.segs[in.pos:]...)
	if len(in.out) > maxSegments {
		return "", nil, 0, fmt.Errorf("%w: more than %d tags and texts", ErrTemplate, maxSegments)
	}
	if w := trimWork(in.out); w > maxTrimWork {
		return "", nil, 0, fmt.Errorf("%w: runs of adjacent tags would take the template parser %d steps (at most %d)", ErrTemplate, w, maxTrimWork)
	}
	var sb strings.Builder
	for _, s := range in.out {
		sb.WriteString(s.source())
	}
	return sb.String(), in.sites, top, nil
}

func (in *instrumenter) peekKeyword() (string, bool) {
	if in.pos >= len(in.segs) || in.segs[in.pos].kind != segStmt {
		return "", false
	}
	return stmtKeyword(in.segs[in.pos].text), true
}

// stmt appends a statement with new content, keeping the tag's whitespace modifiers.
func (in *instrumenter) stmt(like segment, content string) {
	like.text = " " + content + " "
	in.out = append(in.out, like)
}

// hook appends a statement that calls a hook. Its "+" modifiers make it leave the
// whitespace around it alone, and the library's trimming looks past tags to the nearest
// text, so the tags around it trim exactly what they trimmed before.
func (in *instrumenter) hook(call string) int {
	in.out = append(in.out, segment{kind: segStmt, text: " set " + reservedPrefix + " = " + call + " ", left: '+', right: '+'})
	return len(in.out) - 1
}

func (in *instrumenter) nest(line int) error {
	in.depth++
	if in.depth > maxNesting {
		return fmt.Errorf("%w: line %d: statements nest deeper than %d levels", ErrTemplate, line, maxNesting)
	}
	return nil
}

// parseUntil reads segments up to a statement whose keyword is in stops, as the library's
// parser does. inLoop says whether break and continue are allowed.
func (in *instrumenter) parseUntil(inLoop bool, stops ...string) error {
	for in.pos < len(in.segs) {
		seg := in.segs[in.pos]
		if kw, ok := in.peekKeyword(); ok && slices.Contains(stops, kw) {
			return nil
		}
		switch seg.kind {
		case segText:
			in.pos++
			*in.text += len(seg.text)
			in.out = append(in.out, seg)
		case segComment:
			in.pos++
			in.out = append(in.out, seg)
		case segExpr:
			in.pos++
			if strings.TrimSpace(seg.text) == "" {
				*in.text += len("None")
				in.out = append(in.out, seg)
				continue
			}
			e, err := parseExpr(seg.text)
			if err != nil {
				return fmt.Errorf("line %d: %w", seg.line, err)
			}
			seg.text = " " + hookOutput + "(" + in.emit(e) + ") "
			in.out = append(in.out, seg)
		case segStmt:
			if err := in.statement(inLoop); err != nil {
				return err
			}
		}
	}
	return nil
}

func (in *instrumenter) statement(inLoop bool) error {
	seg := in.segs[in.pos]
	kw := stmtKeyword(seg.text)
	switch kw {
	case "if":
		return in.parseIf(seg, inLoop)
	case "for":
		return in.parseFor(seg, inLoop)
	case "set":
		return in.parseSet(seg, inLoop)
	case "macro":
		return in.parseMacro(seg)
	case "call":
		return in.parseCall(seg)
	case "filter":
		return in.parseFilterBlock(seg, inLoop)
	case "raw":
		in.pos++
		in.out = append(in.out, seg)
		for in.pos < len(in.segs) {
			s := in.segs[in.pos]
			in.pos++
			in.out = append(in.out, s)
			if s.kind == segStmt && stmtKeyword(s.text) == "endraw" {
				return nil
			}
			*in.text += len(s.source())
		}
		return fmt.Errorf("line %d: unclosed raw block", seg.line)
	case "break", "continue":
		// The library lets a break escape a macro and stop the caller's loop; Jinja refuses
		// it outside a loop, and so does this.
		if !inLoop {
			return fmt.Errorf("%w: line %d: %s outside a loop", ErrTemplate, seg.line, kw)
		}
		in.pos++
		in.out = append(in.out, seg)
		return nil
	case "generation", "block":
		in.pos++
		in.out = append(in.out, seg)
		if err := in.nest(seg.line); err != nil {
			return err
		}
		defer func() { in.depth-- }()
		end := "end" + kw
		if err := in.parseUntil(inLoop, end); err != nil {
			return err
		}
		return in.expectEnd(end, seg)
	}
	return fmt.Errorf("line %d: unknown statement %q", seg.line, kw)
}

func (in *instrumenter) expectEnd(end string, open segment) error {
	if kw, ok := in.peekKeyword(); !ok || kw != end {
		return fmt.Errorf("line %d: unclosed %s block", open.line, strings.TrimPrefix(end, "end"))
	}
	in.out = append(in.out, in.segs[in.pos])
	in.pos++
	return nil
}

// condition parses the expression after keyword in a statement.
func condition(seg segment, keyword string) (*expr, error) {
	e, err := parseExpr(strings.TrimPrefix(strings.TrimSpace(seg.text), keyword))
	if err != nil {
		return nil, fmt.Errorf("line %d: %s: %w", seg.line, keyword, err)
	}
	return e, nil
}

func (in *instrumenter) parseIf(seg segment, inLoop bool) error {
	in.pos++
	if err := in.nest(seg.line); err != nil {
		return err
	}
	defer func() { in.depth-- }()
	cond, err := condition(seg, "if")
	if err != nil {
		return err
	}
	in.stmt(seg, "if "+in.emit(cond))
	if err := in.parseUntil(inLoop, "elif", "else", "endif"); err != nil {
		return err
	}
	for in.pos < len(in.segs) {
		s := in.segs[in.pos]
		switch stmtKeyword(s.text) {
		case "elif":
			in.pos++
			cond, err := condition(s, "elif")
			if err != nil {
				return err
			}
			in.stmt(s, "elif "+in.emit(cond))
			if err := in.parseUntil(inLoop, "elif", "else", "endif"); err != nil {
				return err
			}
			continue
		case "else":
			in.pos++
			in.out = append(in.out, s)
			if err := in.parseUntil(inLoop, "endif"); err != nil {
				return err
			}
			continue
		case "endif":
			in.pos++
			in.out = append(in.out, s)
			return nil
		default:
			return fmt.Errorf("line %d: unclosed if block", seg.line)
		}
	}
	return fmt.Errorf("line %d: unclosed if block", seg.line)
}

func (in *instrumenter) parseFor(seg segment, inLoop bool) error {
	in.pos++
	if err := in.nest(seg.line); err != nil {
		return err
	}
	defer func() { in.depth-- }()
	forExpr := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg.text), "for"))
	inIdx := findKeyword(forExpr, "in")
	if inIdx < 0 {
		return fmt.Errorf("line %d: for loop missing 'in'", seg.line)
	}
	varPart := strings.TrimSpace(forExpr[:inIdx])
	iterPart := strings.TrimSpace(forExpr[inIdx+2:])
	if n := len(splitVars(varPart)); n != 1 && n != 2 {
		return fmt.Errorf("line %d: invalid for loop variables: %q", seg.line, varPart)
	}
	ifIdx := findKeyword(iterPart, "if")
	recIdx := findKeyword(iterPart, "recursive")
	if recIdx >= 0 {
		iterPart = strings.TrimSpace(iterPart[:recIdx])
		ifIdx = findKeyword(iterPart, "if")
	}
	var filter *expr
	if ifIdx >= 0 {
		var err error
		if filter, err = parseExpr(strings.TrimSpace(iterPart[ifIdx+2:])); err != nil {
			return fmt.Errorf("line %d: for filter: %w", seg.line, err)
		}
		iterPart = strings.TrimSpace(iterPart[:ifIdx])
	}
	iter, err := parseExpr(iterPart)
	if err != nil {
		return fmt.Errorf("line %d: for iterable: %w", seg.line, err)
	}
	head := "for " + varPart + " in " + hookIter + "(" + in.emit(iter) + ")"
	if filter != nil {
		head += " if " + in.emit(filter)
	}
	if recIdx >= 0 {
		head += " recursive"
	}
	in.stmt(seg, head)
	tick := in.hook("")
	outer, text := in.text, 0
	in.text = &text
	err = in.parseUntil(true, "else", "endfor")
	in.text = outer
	if err != nil {
		return err
	}
	in.out[tick].text = " set " + reservedPrefix + " = " + hookTick + "(loop, " + strconv.Itoa(text) + ") "
	if kw, ok := in.peekKeyword(); ok && kw == "else" {
		in.out = append(in.out, in.segs[in.pos])
		in.pos++
		if err := in.parseUntil(inLoop, "endfor"); err != nil {
			return err
		}
	}
	return in.expectEnd("endfor", seg)
}

func (in *instrumenter) parseSet(seg segment, inLoop bool) error {
	in.pos++
	setExpr := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg.text), "set"))
	if !strings.Contains(setExpr, "=") {
		in.out = append(in.out, seg)
		if err := in.nest(seg.line); err != nil {
			return err
		}
		defer func() { in.depth-- }()
		if err := in.parseUntil(inLoop, "endset"); err != nil {
			return err
		}
		return in.expectEnd("endset", seg)
	}
	before, after, _ := strings.Cut(setExpr, "=")
	value, err := parseExpr("(" + strings.TrimSpace(after) + ")")
	if err != nil {
		return fmt.Errorf("line %d: set value: %w", seg.line, err)
	}
	target := strings.TrimSpace(before)
	v := in.emit(value)
	// Setting an attribute changes the namespace object: the mutation hook hears of it.
	if ns, _, ok := strings.Cut(target, "."); ok && isIdentifier(ns) {
		v = hookMut + "(" + ns + ", " + v + ")"
	}
	in.stmt(seg, "set "+target+" = "+v)
	return nil
}

func (in *instrumenter) parseMacro(seg segment) error {
	in.pos++
	if err := in.nest(seg.line); err != nil {
		return err
	}
	defer func() { in.depth-- }()
	macroExpr := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg.text), "macro"))
	before, after, ok := strings.Cut(macroExpr, "(")
	if !ok {
		return fmt.Errorf("line %d: macro missing parameter list", seg.line)
	}
	p := &parser{toks: tokenize(strings.TrimSuffix(after, ")"))}
	var params []string
	for p.peek().kind != tEOF {
		name, err := p.expect(tName, "a parameter name")
		if err != nil {
			return fmt.Errorf("line %d: macro parameter: %w", seg.line, err)
		}
		param := name.val
		if p.peek().val == "=" {
			p.advance()
			def, err := p.parseExpression()
			if err != nil {
				return fmt.Errorf("line %d: macro default: %w", seg.line, err)
			}
			param += "=" + in.emit(def)
		}
		params = append(params, param)
		if p.peek().kind != tEOF {
			if _, err := p.expect(tComma, ","); err != nil {
				return fmt.Errorf("line %d: %w", seg.line, err)
			}
		}
	}
	in.stmt(seg, "macro "+strings.TrimSpace(before)+"("+strings.Join(params, ", ")+")")
	return in.body(seg, "endmacro")
}

// body reads the body of a macro or call block, which runs each time it is called: it is
// framed by enter and leave hooks, and break and continue cannot leave it.
func (in *instrumenter) body(open segment, end string) error {
	enter := in.hook("")
	outer, text := in.text, 0
	in.text = &text
	err := in.parseUntil(false, end)
	in.text = outer
	if err != nil {
		return err
	}
	in.out[enter].text = " set " + reservedPrefix + " = " + hookEnter + "(" + strconv.Itoa(text) + ") "
	in.hook(hookLeave + "()")
	return in.expectEnd(end, open)
}

func (in *instrumenter) parseCall(seg segment) error {
	in.pos++
	if err := in.nest(seg.line); err != nil {
		return err
	}
	defer func() { in.depth-- }()
	callStr := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg.text), "call"))
	head := "call"
	if strings.HasPrefix(callStr, "(") {
		closeIdx := strings.Index(callStr, ")")
		if closeIdx < 0 {
			return fmt.Errorf("line %d: unclosed call args", seg.line)
		}
		head += callStr[:closeIdx+1]
		callStr = strings.TrimSpace(callStr[closeIdx+1:])
	}
	e, err := parseExpr(callStr)
	if err != nil {
		return fmt.Errorf("line %d: call expression: %w", seg.line, err)
	}
	// The library writes out what the callee returns; the hook wraps the callee so that
	// the result is counted as output. Calling the wrapper with no arguments does what
	// the library does with a callee that is not a call expression.
	if e.kind == eCall {
		head += " " + hookCallOut + "(" + in.emit(e.sub[0]) + ")(" + in.emitArgs(e.sub[1:], e.kw) + ")"
	} else {
		head += " " + hookCallOut + "(" + in.emit(e) + ")()"
	}
	in.stmt(seg, head)
	return in.body(seg, "endcall")
}

func (in *instrumenter) parseFilterBlock(seg segment, inLoop bool) error {
	in.pos++
	if err := in.nest(seg.line); err != nil {
		return err
	}
	defer func() { in.depth-- }()
	const body = "__filter_body"
	filterStr := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg.text), "filter"))
	e, err := parseExpr(body + " | " + filterStr)
	if err != nil {
		return fmt.Errorf("line %d: filter expression: %w", seg.line, err)
	}
	var chain []*expr
	for ; e.kind == eFilter; e = e.sub[0] {
		chain = append(chain, e)
	}
	if e.kind != eName || e.text != body {
		return fmt.Errorf("%w: line %d: a filter block must apply a chain of filters", ErrTemplate, seg.line)
	}
	var parts []string
	for i := len(chain) - 1; i >= 0; i-- {
		parts = append(parts, in.emitFilterCall(chain[i]))
	}
	parts = append(parts, hookFBOut)
	in.stmt(seg, "filter "+strings.Join(parts, "|"))
	if err := in.parseUntil(inLoop, "endfilter"); err != nil {
		return err
	}
	return in.expectEnd("endfilter", seg)
}

// findKeyword finds kw as a word outside brackets and quotes, as the library does.
func findKeyword(s, kw string) int {
	depth := 0
	var inStr byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if inStr != 0 {
			if ch == '\\' && i+1 < len(s) {
				i++
				continue
			}
			if ch == inStr {
				inStr = 0
			}
			continue
		}
		switch ch {
		case '\'', '"':
			inStr = ch
			continue
		case '(', '[', '{':
			depth++
			continue
		case ')', ']', '}':
			depth--
			continue
		}
		if depth == 0 && i+len(kw) <= len(s) && s[i:i+len(kw)] == kw {
			before := i == 0 || !isIdentChar(s[i-1])
			after := i+len(kw) >= len(s) || !isIdentChar(s[i+len(kw)])
			if before && after {
				return i
			}
		}
	}
	return -1
}

// isIdentifier reports whether s is a name the expression syntax accepts.
func isIdentifier(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

// splitVars splits the variables of a for loop as the library does.
func splitVars(s string) []string {
	var vars []string
	for _, part := range strings.Split(s, ",") {
		if v := strings.TrimSpace(part); v != "" {
			vars = append(vars, v)
		}
	}
	return vars
}
