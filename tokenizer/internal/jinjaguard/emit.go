package jinjaguard

import (
	"fmt"
	"strconv"
	"strings"
)

// emit rewrites an expression with its hooks. Every composite node comes out in
// parentheses, so the rewritten text parses into the same tree whatever surrounds it.
func (in *instrumenter) emit(e *expr) string {
	switch e.kind {
	case eLit, eName:
		return e.text
	case eAttr:
		return "(" + in.emit(e.sub[0]) + ")." + e.text
	case eItem:
		return "(" + in.emit(e.sub[0]) + ")[" + in.operand(e.sub[1]) + "]"
	case eSlice:
		return in.emitSlice(e)
	case eUnary:
		if e.text == "not" {
			return "(not " + in.emit(e.sub[0]) + ")"
		}
		return "(" + e.text + in.emit(e.sub[0]) + ")"
	case eBinary:
		l, r := e.sub[0], e.sub[1]
		switch op := e.text; op {
		case "and", "or", "-", "/", "//", "**":
			return "(" + in.emit(l) + " " + op + " " + in.emit(r) + ")"
		case "+", "*", "~":
			return in.result("(" + in.operand(l) + " " + op + " " + in.operand(r) + ")")
		case "%":
			if in.plain {
				return "(" + in.emit(l) + " % " + in.emit(r) + ")"
			}
			// The hook sees both operands (the format and its arguments decide the size of the
			// result) and hands the right one back, evaluated once, in its place.
			return in.result("(" + hookFormat + "(" + in.emit(l) + ", " + in.operand(r) + ") % " + hookArgLast + "(0))")
		default: // comparisons, in, not in
			return "(" + in.operand(l) + " " + op + " " + in.operand(r) + ")"
		}
	case eCompare:
		var sb strings.Builder
		sb.WriteString("(" + in.operand(e.sub[0]))
		for i, op := range e.ops {
			sb.WriteString(" " + op + " " + in.operand(e.sub[i+1]))
		}
		return sb.String() + ")"
	case eCond:
		s := "(" + in.emit(e.sub[0]) + " if " + in.emit(e.sub[1])
		if e.sub[2] != nil {
			s += " else " + in.emit(e.sub[2])
		}
		return s + ")"
	case eCall:
		return in.emitCall(e)
	case eFilter:
		return in.result("(" + in.emit(e.sub[0]) + ")|" + in.emitFilterCall(e))
	case eTest:
		deep := !typeTests[e.text]
		arg := in.emit
		if deep {
			arg = in.operand
		}
		s := "(" + arg(e.sub[0]) + " is "
		if e.negated {
			s += "not "
		}
		s += e.text
		if len(e.sub) > 1 {
			args := make([]string, len(e.sub)-1)
			for i, a := range e.sub[1:] {
				args[i] = arg(a)
			}
			s += "(" + strings.Join(args, ", ") + ")"
		}
		return s + ")"
	case eList:
		items := make([]string, len(e.sub))
		for i, it := range e.sub {
			items[i] = in.emit(it)
		}
		if !e.tuple {
			return in.result("[" + strings.Join(items, ", ") + "]")
		}
		if len(items) == 1 {
			return in.result("(" + items[0] + ",)")
		}
		return in.result("(" + strings.Join(items, ", ") + ")")
	case eDict:
		pairs := make([]string, 0, len(e.sub)/2)
		for i := 0; i+1 < len(e.sub); i += 2 {
			pairs = append(pairs, in.operand(e.sub[i])+": "+in.emit(e.sub[i+1]))
		}
		return in.result("{" + strings.Join(pairs, ", ") + "}")
	}
	panic(fmt.Sprintf("jinjaguard: unknown expression kind %d", e.kind))
}

// operand emits e as the operand of an operation whose cost grows with its size.
func (in *instrumenter) operand(e *expr) string {
	s := in.emit(e)
	if in.plain {
		return s
	}
	return hookOperand + "(" + s + ")"
}

// result wraps the text of an expression that creates a value.
func (in *instrumenter) result(s string) string {
	if in.plain {
		return s
	}
	return hookResult + "(" + s + ")"
}

// emitSlice emits a slice. The library turns an invalid index into undefined, instead of
// an error, when the slice and its bounds are constant expressions; wrapping them in
// hooks would make them calls and change that, so constant parts are emitted as they are,
// once their value is known to be small.
func (in *instrumenter) emitSlice(e *expr) string {
	parts := e.sub
	allConst := true
	for _, p := range parts {
		allConst = allConst && constantExpr(p)
	}
	if allConst && !in.plain {
		for _, p := range parts {
			if n := constSize(p); n > maxConstBytes {
				in.fail(fmt.Errorf("%w: a constant expression may make %d bytes, more than the %d allowed", ErrTemplate, n, maxConstBytes))
			}
		}
		in.plain = true
		defer func() { in.plain = false }()
	}
	bound := func(p *expr) string {
		if p == nil {
			return ""
		}
		return in.emit(p)
	}
	s := "(" + in.emit(parts[0]) + ")[" + bound(parts[1]) + ":" + bound(parts[2])
	if parts[3] != nil {
		s += ":" + bound(parts[3])
	}
	s += "]"
	if allConst {
		return hookResult + "(" + s + ")"
	}
	return in.result(s)
}

func (in *instrumenter) fail(err error) {
	if in.err == nil {
		in.err = err
	}
}

// constantExpr is the library's notion of a constant expression.
func constantExpr(e *expr) bool {
	if e == nil {
		return true
	}
	switch e.kind {
	case eLit:
		return true
	case eUnary:
		return constantExpr(e.sub[0])
	case eBinary:
		return constantExpr(e.sub[0]) && constantExpr(e.sub[1])
	case eList:
		for _, it := range e.sub {
			if !constantExpr(it) {
				return false
			}
		}
		return true
	}
	return false
}

// constSize bounds the size of the value of a constant expression.
func constSize(e *expr) int {
	const huge = 1 << 40
	if e == nil {
		return 0
	}
	switch e.kind {
	case eLit:
		return len(e.text) + 24
	case eUnary:
		return constSize(e.sub[0])
	case eList:
		n := 2
		for _, it := range e.sub {
			n = min(huge, n+constSize(it)+2)
		}
		return n
	case eBinary:
		l, r := constSize(e.sub[0]), constSize(e.sub[1])
		switch e.text {
		case "*":
			for _, side := range [][2]*expr{{e.sub[0], e.sub[1]}, {e.sub[1], e.sub[0]}} {
				if side[1].kind == eLit {
					if n, err := strconv.ParseInt(strings.TrimLeft(side[1].text, "+"), 10, 64); err == nil {
						if n <= 0 {
							return 24
						}
						if s := constSize(side[0]); n < huge/int64(s) {
							return int(n) * s
						}
						return huge
					}
				}
			}
			return huge
		case "%":
			// Each conversion of a format may be padded to a million bytes.
			return min(huge, l*1_000_000+r)
		}
		return min(huge, l+r+24)
	}
	return huge
}

// emitCall emits a function or method call: the callee is checked before it is called,
// the arguments as operands, and the result as a created value. replace and format on a
// string can make a result much larger than their operands; their arguments go through a
// pre hook that checks the size of the result first.
func (in *instrumenter) emitCall(e *expr) string {
	fn, args := e.sub[0], e.sub[1:]
	name := "'" + callableName(fn) + "'"
	if fn.kind == eAttr && (fn.text == "replace" || fn.text == "format") {
		id := in.addSite(site{method: true, name: fn.text, nargs: len(args), kw: kwNames(e.kw)})
		pre := []string{strconv.Itoa(id), in.emit(fn.sub[0])}
		pre = append(pre, in.emitValues(args, e.kw)...)
		callee := hookCallee + "((" + hookPreM + "(" + strings.Join(pre, ", ") + "))." + fn.text + ", " + name + ")"
		return in.result(callee + "(" + argRefs(len(args), e.kw) + ")")
	}
	callee := in.emit(fn)
	if fn.kind == eAttr && mutators[fn.text] {
		callee = "(" + hookRecv + "(" + in.emit(fn.sub[0]) + "))." + fn.text
	}
	callee = hookCallee + "(" + callee + ", " + name + ")"
	argList := in.emitArgs(args, e.kw)
	if fn.kind == eName && iterates[fn.text] {
		// These iterate their positional arguments, a string character by character: the
		// iteration hook bounds that first.
		parts := make([]string, 0, len(args)+1)
		for _, a := range args {
			parts = append(parts, hookIter+"("+in.operand(a)+")")
		}
		if kw := in.emitArgs(nil, e.kw); kw != "" {
			parts = append(parts, kw)
		}
		argList = strings.Join(parts, ", ")
	}
	return in.result(callee + "(" + argList + ")")
}

// iterates are the globals that iterate their positional arguments: dict and namespace
// build a dict from an iterable of pairs, and loop (in a recursive for) runs the loop over
// its argument.
var iterates = map[string]bool{"dict": true, "namespace": true, "loop": true}

// emitArgs emits call arguments, each checked as an operand.
func (in *instrumenter) emitArgs(args []*expr, kw []kwarg) string {
	parts := make([]string, 0, len(args)+len(kw))
	for _, a := range args {
		parts = append(parts, in.operand(a))
	}
	for _, k := range kw {
		if k.name == "" {
			parts = append(parts, "**"+in.operand(k.value))
		} else {
			parts = append(parts, k.name+"="+in.operand(k.value))
		}
	}
	return strings.Join(parts, ", ")
}

// emitValues emits the values of arguments, positional then keyword, in the order the
// library evaluates them.
func (in *instrumenter) emitValues(args []*expr, kw []kwarg) []string {
	parts := make([]string, 0, len(args)+len(kw))
	for _, a := range args {
		parts = append(parts, in.emit(a))
	}
	for _, k := range kw {
		parts = append(parts, in.emit(k.value))
	}
	return parts
}

// emitFilterCall emits "pre(site, args...)|name(refs...)", the filter f without its
// input: the pre hook receives the input and the arguments, checks them and keeps the
// arguments for the filter to read back.
func (in *instrumenter) emitFilterCall(f *expr) string {
	args := f.sub[1:]
	id := in.addSite(site{name: f.text, nargs: len(args), kw: kwNames(f.kw)})
	pre := append([]string{strconv.Itoa(id)}, in.emitValues(args, f.kw)...)
	call := f.text
	if refs := argRefs(len(args), f.kw); refs != "" {
		call += "(" + refs + ")"
	}
	return hookPre + "(" + strings.Join(pre, ", ") + ")|" + call
}

func (in *instrumenter) addSite(s site) int {
	in.sites = append(in.sites, s)
	return len(in.sites) - 1
}

func kwNames(kw []kwarg) []string {
	names := make([]string, len(kw))
	for i, k := range kw {
		names[i] = k.name
	}
	return names
}

// argRefs reads back n positional and the keyword arguments kept by a pre hook.
func argRefs(n int, kw []kwarg) string {
	total := n + len(kw)
	ref := func(i int) string {
		if i == total-1 {
			return hookArgLast + "(" + strconv.Itoa(i) + ")"
		}
		return hookArg + "(" + strconv.Itoa(i) + ")"
	}
	parts := make([]string, 0, total)
	for i := range n {
		parts = append(parts, ref(i))
	}
	for j, k := range kw {
		switch k.name {
		case "":
			parts = append(parts, "**"+ref(n+j))
		default:
			parts = append(parts, k.name+"="+ref(n+j))
		}
	}
	return strings.Join(parts, ", ")
}

// callableName names a callee in an error message as the library does.
func callableName(e *expr) string {
	switch e.kind {
	case eName:
		return e.text
	case eAttr:
		return callableName(e.sub[0]) + "." + e.text
	case eItem:
		return callableName(e.sub[0]) + "[item]"
	}
	names := map[exprKind]string{eLit: "literal", eSlice: "slice", eUnary: "unary", eBinary: "binary",
		eCompare: "compare", eCond: "condExpr", eCall: "call", eFilter: "filter", eTest: "test", eList: "list", eDict: "dict"}
	return names[e.kind]
}
