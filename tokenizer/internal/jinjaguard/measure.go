package jinjaguard

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/blockdiff/blockdiff/internal/jsondepth"
)

const (
	// maxValueDepth bounds the nesting of lists and dicts. The library walks values
	// recursively, and looks for cycles along the path at every level.
	maxValueDepth = 128
	// valueBytes is about what one jinja.Value costs in memory.
	valueBytes = 24
	// runeItemBytes is about what turning one character of a string into an item costs
	// (a Value and a one-character string), which iterating over a string does.
	runeItemBytes = 48
	// maxQuadratic bounds the steps of an operation that compares every item with every
	// other (unique) or rewrites its text once per argument (format).
	maxQuadratic = 1 << 28
	// saturated stands for "too large" in size arithmetic.
	saturated = math.MaxInt / 4
)

func addSat(a, b int) int { return min(saturated, a+b) }

func mulSat(a, b int) int {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > saturated/b {
		return saturated
	}
	return a * b
}

// size measures v as the text it prints as (top-level: as the template writes it;
// nested: as it appears inside a list), failing beyond Limits.MaxValueBytes, for a value
// nested deeper than maxValueDepth, and for a value that contains itself (the library's
// comparisons of such values never end). The walk stops at the limit, so it costs at most
// about Limits.MaxValueBytes steps.
func (r *render) size(v jinja.Value, top bool) (int, error) {
	z := sizer{limit: r.lim.MaxValueBytes}
	if !r.dataMoved {
		z.data, z.sizes = r.data, r.sizes
	}
	if err := z.walk(v, top); err != nil {
		return 0, r.fail(err)
	}
	return z.n, nil
}

type sizer struct {
	limit, n  int
	ancestors []any
	deepest   int // the deepest nesting seen
	// Remembered sizes of the caller's data (nil: none).
	data  map[any]bool
	sizes map[any]sizeEntry
}

func (z *sizer) walk(v jinja.Value, top bool) error {
	switch {
	case v.IsString():
		z.n += len(v.AsString())
		if !top {
			z.n += 2
		}
	case v.IsList(), v.IsDict():
		var id any
		if v.IsList() {
			id = v.AsList()
		} else {
			id = v.AsDict()
		}
		for _, a := range z.ancestors {
			if a == id {
				return fmt.Errorf("%w: a list or dict that contains itself", ErrLimit)
			}
		}
		if len(z.ancestors) >= maxValueDepth {
			return fmt.Errorf("%w: lists and dicts nested deeper than %d levels", ErrLimit, maxValueDepth)
		}
		cache := z.data != nil && z.data[id]
		if cache {
			if e, ok := z.sizes[id]; ok {
				if len(z.ancestors)+e.depth > maxValueDepth {
					return fmt.Errorf("%w: lists and dicts nested deeper than %d levels", ErrLimit, maxValueDepth)
				}
				z.n += e.size
				z.deepest = max(z.deepest, len(z.ancestors)+e.depth)
				break
			}
		}
		start := z.n
		z.ancestors = append(z.ancestors, id)
		z.deepest = max(z.deepest, len(z.ancestors))
		z.n += 2
		if v.IsList() {
			for _, it := range v.AsList().Items {
				z.n += 2
				if err := z.walk(it, false); err != nil {
					return err
				}
			}
		} else {
			d := v.AsDict()
			for _, k := range d.Keys {
				z.n += len(k) + 6
				if z.n > z.limit {
					break
				}
				if err := z.walk(d.Data[k], false); err != nil {
					return err
				}
			}
		}
		z.ancestors = z.ancestors[:len(z.ancestors)-1]
		if cache {
			z.sizes[id] = sizeEntry{size: z.n - start, depth: z.deepest - len(z.ancestors)}
		}
	case v.IsInt():
		z.n += intLen(v.AsInt())
	case v.IsFloat():
		z.n += 24
	case v.IsBool(), v.IsNone():
		z.n += 5
	case v.IsCallable():
		if !top {
			z.n += 16 + len(v.AsCallable().Name)
		}
	case v.IsUndefined():
		if !top {
			z.n += len("Undefined")
		}
	}
	if z.n > z.limit {
		return fmt.Errorf("%w: a value of more than %d bytes (Limits.MaxValueBytes)", ErrLimit, z.limit)
	}
	return nil
}

// intLen is the number of characters of n in decimal.
func intLen(n int64) int {
	l := 1
	if n < 0 {
		l++
	}
	for n <= -10 || n >= 10 {
		n /= 10
		l++
	}
	return l
}

// shallowSize is about the memory a newly made value takes beyond the values it holds.
func shallowSize(v jinja.Value) int {
	switch {
	case v.IsString():
		return len(v.AsString()) + valueBytes
	case v.IsList():
		return (v.AsList().Len() + 1) * valueBytes
	case v.IsDict():
		return (v.AsDict().Len() + 1) * 3 * valueBytes
	}
	return valueBytes
}

// printValue is the text the library writes for v.
func printValue(v jinja.Value) string {
	switch {
	case v.IsUndefined(), v.IsCallable():
		return ""
	case v.IsString():
		return v.AsString()
	}
	return v.String()
}

// items counts the items the library iterates in v, and whether it makes one per
// character.
func items(v jinja.Value) (n int, runes bool) {
	switch {
	case v.IsList():
		return v.AsList().Len(), false
	case v.IsDict():
		return v.AsDict().Len(), false
	case v.IsString():
		return utf8.RuneCountInString(v.AsString()), true
	}
	return 0, false
}

// eachItem calls fn for each item the library iterates in v, without making them all.
func eachItem(v jinja.Value, fn func(jinja.Value) error) error {
	switch {
	case v.IsList():
		for _, it := range v.AsList().Items {
			if err := fn(it); err != nil {
				return err
			}
		}
	case v.IsDict():
		for _, k := range v.AsDict().Keys {
			if err := fn(jinja.NewString(k)); err != nil {
				return err
			}
		}
	case v.IsString():
		for _, c := range v.AsString() {
			if err := fn(jinja.NewString(string(c))); err != nil {
				return err
			}
		}
	}
	return nil
}

// argument is the library's builtinArgument: a keyword argument, else positional i
// (counting the input as 0), else def.
func argument(args []jinja.Value, kw map[string]jinja.Value, i int, name string, def jinja.Value) jinja.Value {
	if v, ok := kw[name]; ok {
		return v
	}
	if i < len(args) {
		return args[i]
	}
	return def
}

// iterating filters make one item per element (per character of a string).
var iterating = map[string]bool{
	"list": true, "first": true, "last": true, "max": true, "min": true, "sum": true, "select": true,
	"reject": true, "selectattr": true, "rejectattr": true, "sort": true, "dictsort": true, "items": true,
	"batch": true, "unique": true, "join": true, "map": true,
}

// projectFilter estimates the printed size of what builtin filter name makes of args
// (args[0] is the input), the memory it needs on the way counted a quarter. It fails for
// work that would grow faster than the size of the operands allows.
func (r *render) projectFilter(name string, args []jinja.Value, kw map[string]jinja.Value, depth int) (int, error) {
	input := args[0]
	in, err := r.size(input, true)
	if err != nil {
		return 0, err
	}
	n, runes := items(input)
	base := in
	if iterating[name] {
		base = addSat(in, 5*n)
		if runes {
			base = max(base, mulSat(n, runeItemBytes)/4)
		}
	}
	switch name {
	case "replace":
		if len(args) < 3 {
			return base, nil
		}
		count := -1
		if len(args) > 3 {
			count = clampInt(toInt64(args[3]))
		}
		if c, ok := kw["count"]; ok {
			count = clampInt(toInt64(c))
		}
		return replaceSize(printValue(input), printValue(args[1]), printValue(args[2]), count), nil
	case "indent":
		pad := 0
		if w := argument(args, kw, 1, "width", jinja.NewInt(4)); w.IsString() {
			pad = len(w.AsString())
		} else {
			pad = max(0, clampInt(toInt64(w)))
		}
		s := printValue(input)
		lines := 1 + strings.Count(s, "\n") + strings.Count(s, "\r") + strings.Count(s, "\v") + strings.Count(s, "\f") +
			strings.Count(s, "\x1c") + strings.Count(s, "\x1d") + strings.Count(s, "\x1e") +
			strings.Count(s, "\u0085") + strings.Count(s, "\u2028") + strings.Count(s, "\u2029")
		return addSat(addSat(len(s), pad), mulSat(lines, pad)), nil
	case "batch":
		lc := toInt64(argument(args, kw, 1, "linecount", jinja.NewInt(0)))
		if lc <= 0 {
			return base, nil
		}
		fill := argument(args, kw, 2, "fill_with", jinja.None())
		if fill.IsNone() || n == 0 {
			return base, nil
		}
		fillSize, err := r.size(fill, false)
		if err != nil {
			return 0, err
		}
		slots := saturated
		if lc < int64(saturated) {
			batches := (int64(n) + lc - 1) / lc
			if batches < int64(saturated)/lc {
				slots = int(batches * lc)
			}
		}
		return addSat(base, mulSat(slots, fillSize+2)), nil
	case "join":
		sep := ""
		if len(args) > 1 {
			sep = printValue(args[1])
		}
		if d, ok := kw["d"]; ok {
			sep = printValue(d)
		}
		return addSat(base, mulSat(max(n-1, 0), len(sep))), nil
	case "tojson":
		return r.tojsonSize(input, args, kw)
	case "fromjson", "from_json":
		if !input.IsString() {
			return base, nil
		}
		if d, _ := jsondepth.Scan(input.AsString(), maxValueDepth); d > maxValueDepth {
			return 0, fmt.Errorf("%w: fromjson of JSON nested %d levels deep, more than %d", ErrLimit, d, maxValueDepth)
		}
		// The decoded values take many times the bytes of their text.
		return mulSat(len(input.AsString()), 16), nil
	case "unique":
		if mulSat(n, n) > maxQuadratic || mulSat(n, in) > maxQuadratic {
			return 0, fmt.Errorf("%w: unique of %d items of %d bytes compares too much", ErrLimit, n, in)
		}
		return base, nil
	case "map":
		if _, ok := kw["attribute"]; ok || len(args) < 2 {
			return base, nil
		}
		if depth > 4 {
			return 0, fmt.Errorf("%w: map nested more than 4 deep", ErrLimit)
		}
		inner := printValue(args[1])
		total := base
		err := eachItem(input, func(it jinja.Value) error {
			p, err := r.projectFilter(inner, append([]jinja.Value{it}, args[2:]...), kw, depth+1)
			total = addSat(total, p)
			if err == nil && total > r.lim.MaxValueBytes {
				err = fmt.Errorf("%w: map(%q) would make more than %d bytes (Limits.MaxValueBytes)", ErrLimit, inner, r.lim.MaxValueBytes)
			}
			return err
		})
		return total, err
	case "escape", "e":
		return mulSat(in, 6), nil
	case "length", "count", "reverse":
		if runes {
			return mulSat(n, 4), nil
		}
		return base, nil
	}
	// Other filters make about as much as they take.
	total := 2 * base
	for _, a := range args[1:] {
		s, err := r.size(a, false)
		if err != nil {
			return 0, err
		}
		total = addSat(total, s)
	}
	return total, nil
}

// replaceSize is the length of strings.Replace(s, old, new, count).
func replaceSize(s, old, new string, count int) int {
	n := strings.Count(s, old) // for an empty old, the character count plus one
	if count >= 0 && count < n {
		n = count
	}
	return addSat(len(s), mulSat(n, len(new)))
}

// projectMethod estimates the result of a string method with a result larger than its
// operands.
func (r *render) projectMethod(name string, recv jinja.Value, args []jinja.Value) (int, error) {
	if !recv.IsString() {
		return 0, nil
	}
	s := recv.AsString()
	switch name {
	case "replace":
		if len(args) < 2 {
			return len(s), nil
		}
		count := -1
		if len(args) > 2 {
			count = clampInt(toInt64(args[2]))
		}
		return replaceSize(s, printValue(args[0]), printValue(args[1]), count), nil
	case "format":
		// Each argument replaces the placeholders of the text as it is after the one
		// before, which can double it each time: follow the library's steps, stopping as
		// soon as the text grows too long.
		result, work := s, 0
		for i, a := range args {
			p := printValue(a)
			for _, ph := range []string{fmt.Sprintf("{%d}", i), "{}"} {
				c := strings.Count(result, ph)
				if ph == "{}" {
					c = min(c, 1)
				}
				grown := addSat(len(result), mulSat(c, len(p)))
				if grown > r.lim.MaxValueBytes {
					return grown, nil
				}
				if work = addSat(work, grown); work > maxQuadratic {
					return 0, fmt.Errorf("%w: format with %d arguments rewrites too much", ErrLimit, len(args))
				}
				if c > 0 {
					result = strings.Replace(result, ph, p, c)
				}
			}
		}
		return len(result), nil
	}
	return len(s), nil
}

// tojsonSize bounds the length of the JSON the library's tojson writes for v.
func (r *render) tojsonSize(v jinja.Value, args []jinja.Value, kw map[string]jinja.Value) (int, error) {
	itemSep, keySep := 2, 2
	pad := -1
	if ind := argument(args, kw, 2, "indent", jinja.None()); !ind.IsNone() && !ind.IsUndefined() {
		if ind.IsString() {
			pad = len(ind.AsString())
		} else {
			pad = max(0, clampInt(toInt64(ind)))
		}
		if pad > r.lim.MaxValueBytes {
			return pad, nil
		}
		itemSep = 1
	}
	if seps := argument(args, kw, 3, "separators", jinja.None()); seps.IsList() && seps.AsList().Len() == 2 {
		itemSep, keySep = len(printValue(seps.AsList().Items[0])), len(printValue(seps.AsList().Items[1]))
	}
	z := jsonSizer{limit: r.lim.MaxValueBytes, itemSep: itemSep, keySep: keySep, pad: pad}
	z.walk(v, 0)
	return z.n, nil
}

type jsonSizer struct {
	limit, n             int
	itemSep, keySep, pad int
}

func (z *jsonSizer) newline(depth int) {
	if z.pad >= 0 {
		z.n = addSat(z.n, addSat(1, mulSat(depth, z.pad)))
	}
}

// walk adds the JSON length of v; values are known to be acyclic and shallow (size checked
// them first), and the walk stops once over the limit.
func (z *jsonSizer) walk(v jinja.Value, depth int) {
	if z.n > z.limit {
		return
	}
	switch {
	case v.IsString():
		// An escape takes at most six bytes for one.
		z.n = addSat(z.n, 6*len(v.AsString())+2)
	case v.IsList():
		z.n += 2
		for _, it := range v.AsList().Items {
			z.n = addSat(z.n, z.itemSep)
			z.newline(depth + 1)
			z.walk(it, depth+1)
		}
		z.newline(depth)
	case v.IsDict():
		z.n += 2
		d := v.AsDict()
		for _, k := range d.Keys {
			z.n = addSat(z.n, z.itemSep+z.keySep+6*len(k)+2)
			z.newline(depth + 1)
			z.walk(d.Data[k], depth+1)
		}
		z.newline(depth)
	default:
		z.n += 24
	}
}

// formatSize bounds the length of what a %-format makes, beyond its arguments: the format
// itself and the padding its widths and precisions ask for. A width taken from the
// arguments (*) is refused, since it could be anything.
func formatSize(f string) (int, error) {
	n := len(f)
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		num := 0
		for i < len(f) && strings.IndexByte("#0- +0123456789.*hlL", f[i]) >= 0 {
			switch c := f[i]; {
			case c == '*':
				return 0, fmt.Errorf("%w: a %% format that takes its width from the arguments", ErrLimit)
			case c >= '0' && c <= '9':
				num = min(saturated, num*10+int(c-'0'))
			default:
				n, num = addSat(n, num), 0
			}
			i++
		}
		n = addSat(n, num)
	}
	return n, nil
}
