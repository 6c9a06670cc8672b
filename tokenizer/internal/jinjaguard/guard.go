package jinjaguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// ErrLimit is wrapped by the error of a render that exceeded one of its Limits.
var ErrLimit = errors.New("chat template exceeds a limit")

// Limits bounds the work of one render. A zero field takes its default.
type Limits struct {
	// MaxIterations bounds the loop iterations plus macro and caller calls (default
	// 1,000,000), and the length of a list made by range.
	MaxIterations int
	// MaxDepth bounds the nesting of macro and caller calls, and of recursive loops
	// (default 100).
	MaxDepth int
	// MaxOutputBytes bounds the rendered text, counting what macros and blocks write before
	// it is used (default 16 MiB).
	MaxOutputBytes int
	// MaxValueBytes bounds the size of any one value an operation takes or makes, measured
	// as the text it prints as (default 16 MiB). The template's input counts too: a single
	// message larger than this cannot be rendered.
	MaxValueBytes int
	// MaxWorkBytes bounds the bytes of all the values the template creates (default 1 GiB).
	MaxWorkBytes int
	// Timeout bounds the wall time of the render (default 10 s); the context's deadline
	// applies as well.
	Timeout time.Duration
}

// DefaultLimits are the limits that zero fields take.
var DefaultLimits = Limits{
	MaxIterations:  1_000_000,
	MaxDepth:       100,
	MaxOutputBytes: 16 << 20,
	MaxValueBytes:  16 << 20,
	MaxWorkBytes:   1 << 30,
	Timeout:        10 * time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.MaxIterations, d.MaxIterations)
	pick(&l.MaxDepth, d.MaxDepth)
	pick(&l.MaxOutputBytes, d.MaxOutputBytes)
	pick(&l.MaxValueBytes, d.MaxValueBytes)
	pick(&l.MaxWorkBytes, d.MaxWorkBytes)
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	return l
}

// Template is a chat template rewritten with budget hooks and compiled.
type Template struct {
	tmpl  *jinja.Template
	sites []site
	text  int // literal text written outside loops, macros and call blocks
}

// Compile checks and rewrites src, then compiles it with the library. It fails with an
// error wrapping ErrTemplate for a template whose size or shape is refused, and with the
// library's error for a syntax error.
func Compile(src string) (*Template, error) {
	out, sites, text, err := instrument(src)
	if err != nil {
		return nil, err
	}
	tmpl, err := jinja.Compile(out)
	if err != nil {
		return nil, err
	}
	return &Template{tmpl: tmpl, sites: sites, text: text}, nil
}

// maxErrorBytes bounds the text of an error a render reports: a template can raise an
// exception with a message as large as a value may be.
const maxErrorBytes = 4096

// Render renders the template with data under lim and ctx. A render that exceeds a limit
// fails with an error wrapping ErrLimit; one whose context ends fails with an error
// wrapping the context's error. Errors of the template itself are reported as the library
// reports them. A panic inside the library becomes an error.
func (t *Template) Render(ctx context.Context, data map[string]jinja.Value, lim Limits) (out string, err error) {
	r := newRender(ctx, lim, t.sites)
	if err := r.check(); err != nil {
		return "", err
	}
	if err := r.addOutput(t.text); err != nil {
		return "", err
	}
	vals := make(map[string]jinja.Value, len(data)+20)
	for k, v := range data {
		vals[k] = v
		markData(r.data, v, 0)
	}
	r.bind(vals)
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("chat template: the template engine failed: %v", p)
		}
		if r.err != nil {
			out, err = "", r.err
		}
	}()
	out, err = t.tmpl.RenderValues(vals)
	if err != nil && r.err == nil {
		msg := err.Error()
		if len(msg) > maxErrorBytes {
			cut := maxErrorBytes
			for cut > 0 && !utf8.RuneStart(msg[cut]) {
				cut--
			}
			msg = msg[:cut] + "..."
		}
		return "", errors.New(msg)
	}
	return out, err
}

// render is the budget of one render.
type render struct {
	ctx      context.Context
	lim      Limits
	deadline time.Time
	sites    []site
	err      error // the first limit exceeded; every hook fails with it from then on

	steps, depth, output, work int
	stash                      [][]jinja.Value

	// The lists and dicts of the caller's data, and the sizes measured of them. Templates
	// measure the same messages again and again (messages|length in a loop over them);
	// the sizes stay valid until a template changes a list or dict of the data, after which
	// nothing is remembered any more.
	data      map[any]bool
	sizes     map[any]sizeEntry
	dataMoved bool
}

type sizeEntry struct{ size, depth int }

func newRender(ctx context.Context, lim Limits, sites []site) *render {
	lim = lim.withDefaults()
	return &render{ctx: ctx, lim: lim, sites: sites, deadline: time.Now().Add(lim.Timeout),
		data: map[any]bool{}, sizes: map[any]sizeEntry{}}
}

// fail records err as the outcome of the render and returns it.
func (r *render) fail(err error) error {
	if r.err == nil {
		r.err = err
	}
	return r.err
}

func (r *render) limit(format string, args ...any) error {
	return r.fail(fmt.Errorf("%w: "+format, append([]any{ErrLimit}, args...)...))
}

// check fails once the render must stop: a limit was exceeded, the context ended or the
// time ran out.
func (r *render) check() error {
	if r.err != nil {
		return r.err
	}
	select {
	case <-r.ctx.Done():
		return r.fail(fmt.Errorf("chat template: rendering stopped: %w", context.Cause(r.ctx)))
	default:
	}
	if time.Now().After(r.deadline) {
		return r.limit("rendering took longer than %v (Limits.Timeout)", r.lim.Timeout)
	}
	return nil
}

func (r *render) addOutput(n int) error {
	if n > r.lim.MaxOutputBytes-r.output {
		return r.limit("the output would exceed %d bytes (Limits.MaxOutputBytes)", r.lim.MaxOutputBytes)
	}
	r.output += n
	return nil
}

func (r *render) addWork(n int) error {
	if n > r.lim.MaxWorkBytes-r.work {
		return r.limit("the values created would exceed %d bytes (Limits.MaxWorkBytes)", r.lim.MaxWorkBytes)
	}
	r.work += n
	return nil
}

func (r *render) step() error {
	if r.steps >= r.lim.MaxIterations {
		return r.limit("more than %d loop iterations and macro calls (Limits.MaxIterations)", r.lim.MaxIterations)
	}
	r.steps++
	return nil
}

// bind adds the hooks to the data of a render.
func (r *render) bind(vals map[string]jinja.Value) {
	type fn = func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error)
	hooks := map[string]fn{
		hookOperand: r.hookOperand, hookResult: r.hookResult, hookOutput: r.hookOutput, hookIter: r.hookIter,
		hookTick: r.hookTick, hookEnter: r.hookEnter, hookLeave: r.hookLeave, hookPre: r.hookPre,
		hookPreM: r.hookPreMethod, hookArg: r.hookArg, hookArgLast: r.hookArgLast, hookFormat: r.hookFormat,
		hookCallee: r.hookCallee, hookCallOut: r.hookCallOut, hookFBOut: r.hookOutput, hookRecv: r.hookRecv,
		hookMut: r.hookMut, "range": r.rangeFn,
	}
	for name, f := range hooks {
		vals[name] = jinja.NewCallable(name, f)
	}
}

// first returns the first argument of a hook, or undefined.
func first(args []jinja.Value) jinja.Value {
	if len(args) == 0 {
		return jinja.Undefined()
	}
	return args[0]
}

func (r *render) hookOperand(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	_, err := r.size(v, false)
	return v, err
}

func (r *render) hookResult(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	if _, err := r.size(v, false); err != nil {
		return v, err
	}
	return v, r.addWork(shallowSize(v))
}

// hookOutput checks a value about to be written out and counts it as output.
func (r *render) hookOutput(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	n, err := r.size(v, true)
	if err != nil {
		return v, err
	}
	return v, r.addOutput(n)
}

// hookIter refuses a loop over more items than the iterations left, before the library
// builds its list of items.
func (r *render) hookIter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	n := 0
	switch {
	case v.IsList():
		n = v.AsList().Len()
	case v.IsDict():
		n = v.AsDict().Len()
	case v.IsString():
		n = utf8.RuneCountInString(v.AsString())
	}
	if left := r.lim.MaxIterations - r.steps; n > left {
		return v, r.limit("a loop over %d items, with %d of %d iterations left (Limits.MaxIterations)", n, left, r.lim.MaxIterations)
	}
	return v, nil
}

// hookTick counts one loop iteration and the text its body may write.
func (r *render) hookTick(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := r.check(); err != nil {
		return jinja.None(), err
	}
	if err := r.step(); err != nil {
		return jinja.None(), err
	}
	if len(args) == 2 {
		if loop := args[0]; loop.IsDict() {
			if d, ok := loop.AsDict().Get("depth"); ok && d.IsInt() && d.AsInt() > int64(r.lim.MaxDepth) {
				return jinja.None(), r.limit("recursive loops nest deeper than %d (Limits.MaxDepth)", r.lim.MaxDepth)
			}
		}
		if args[1].IsInt() {
			return jinja.None(), r.addOutput(int(args[1].AsInt()))
		}
	}
	return jinja.None(), nil
}

// hookEnter counts a macro or caller call and the text its body may write.
func (r *render) hookEnter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := r.check(); err != nil {
		return jinja.None(), err
	}
	if err := r.step(); err != nil {
		return jinja.None(), err
	}
	if r.depth >= r.lim.MaxDepth {
		return jinja.None(), r.limit("macro and caller calls nest deeper than %d (Limits.MaxDepth)", r.lim.MaxDepth)
	}
	r.depth++
	if len(args) == 1 && args[0].IsInt() {
		return jinja.None(), r.addOutput(int(args[0].AsInt()))
	}
	return jinja.None(), nil
}

func (r *render) hookLeave([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	if r.depth > 0 {
		r.depth--
	}
	return jinja.None(), r.check()
}

// hookPre is the filter that runs before a filter: args are its input, the site and the
// filter's arguments. It checks them, projects the size of the filter's result, and keeps
// the arguments for the filter to read back.
func (r *render) hookPre(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 {
		return first(args), r.fail(errors.New("chat template: internal error: bad filter hook call"))
	}
	return r.pre(args[0], args[1], args[2:])
}

// hookPreMethod is the same for a method call: args are the site, the receiver and the
// method's arguments.
func (r *render) hookPreMethod(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 {
		return first(args), r.fail(errors.New("chat template: internal error: bad method hook call"))
	}
	return r.pre(args[1], args[0], args[2:])
}

func (r *render) pre(input, siteID jinja.Value, vals []jinja.Value) (jinja.Value, error) {
	if err := r.check(); err != nil {
		return input, err
	}
	if !siteID.IsInt() || siteID.AsInt() < 0 || siteID.AsInt() >= int64(len(r.sites)) {
		return input, r.fail(errors.New("chat template: internal error: bad hook site"))
	}
	s := r.sites[siteID.AsInt()]
	if len(vals) != s.nargs+len(s.kw) {
		return input, r.fail(errors.New("chat template: internal error: hook site arity"))
	}
	if _, err := r.size(input, false); err != nil {
		return input, err
	}
	for _, v := range vals {
		if _, err := r.size(v, false); err != nil {
			return input, err
		}
	}
	args := append([]jinja.Value{input}, vals[:s.nargs]...)
	kw := map[string]jinja.Value{}
	for i, name := range s.kw {
		v := vals[s.nargs+i]
		if name != "" {
			kw[name] = v
		} else if v.IsDict() {
			for _, k := range v.AsDict().Keys {
				kw[k] = v.AsDict().Data[k]
			}
		}
	}
	var n int
	var err error
	if s.method {
		n, err = r.projectMethod(s.name, input, vals[:s.nargs])
	} else {
		n, err = r.projectFilter(s.name, args, kw, 0)
	}
	if err != nil {
		return input, r.fail(err)
	}
	if n > r.lim.MaxValueBytes {
		kind := "filter"
		if s.method {
			kind = "method"
		}
		return input, r.limit("%s %s would make a value of about %d bytes, more than %d (Limits.MaxValueBytes)", kind, s.name, n, r.lim.MaxValueBytes)
	}
	if len(vals) > 0 {
		r.stash = append(r.stash, vals)
	}
	return input, nil
}

// hookArg returns argument i kept by the last pre hook.
func (r *render) hookArg(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(r.stash) == 0 || len(args) != 1 || !args[0].IsInt() {
		return jinja.Undefined(), r.fail(errors.New("chat template: internal error: argument hook"))
	}
	top := r.stash[len(r.stash)-1]
	i := args[0].AsInt()
	if i < 0 || i >= int64(len(top)) {
		return jinja.Undefined(), r.fail(errors.New("chat template: internal error: argument hook index"))
	}
	return top[i], nil
}

// markData records the lists and dicts of v as the caller's data.
func markData(data map[any]bool, v jinja.Value, depth int) {
	if depth > maxValueDepth {
		return
	}
	switch {
	case v.IsList():
		if data[v.AsList()] {
			return
		}
		data[v.AsList()] = true
		for _, it := range v.AsList().Items {
			markData(data, it, depth+1)
		}
	case v.IsDict():
		if data[v.AsDict()] {
			return
		}
		data[v.AsDict()] = true
		for _, k := range v.AsDict().Keys {
			markData(data, v.AsDict().Data[k], depth+1)
		}
	}
}

// changes notes that v may be about to change.
func (r *render) changes(v jinja.Value) {
	if (v.IsList() && r.data[v.AsList()]) || (v.IsDict() && r.data[v.AsDict()]) {
		r.dataMoved = true
	}
}

// hookRecv hears of the receiver of a method that may change it.
func (r *render) hookRecv(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	r.changes(v)
	return v, r.check()
}

// hookMut hears of an attribute about to be set on args[0]; it returns the value, args[1].
func (r *render) hookMut(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 {
		return first(args), r.fail(errors.New("chat template: internal error: mutation hook"))
	}
	r.changes(args[0])
	return args[1], r.check()
}

// hookArgLast is hookArg for the last argument: it drops the kept arguments.
func (r *render) hookArgLast(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	v, err := r.hookArg(args, kw)
	if err == nil {
		r.stash = r.stash[:len(r.stash)-1]
	}
	return v, err
}

// hookFormat checks the operands of %, args[0] the format and args[1] its arguments: the
// format's widths and precisions and the arguments decide how long the result is. It
// returns the format and keeps the arguments for the right side of % to read back.
func (r *render) hookFormat(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 {
		return first(args), r.fail(errors.New("chat template: internal error: format hook"))
	}
	f, vals := args[0], args[1]
	if err := r.check(); err != nil {
		return f, err
	}
	if _, err := r.size(f, false); err != nil {
		return f, err
	}
	r.stash = append(r.stash, []jinja.Value{vals})
	if !f.IsString() {
		return f, nil
	}
	n, err := formatSize(f.AsString())
	if err != nil {
		return f, r.fail(err)
	}
	items := []jinja.Value{vals}
	if vals.IsList() {
		// A tuple spreads over the conversions; anything else is one argument, which Go's
		// formatting prints shallowly (nested lists as addresses).
		items = vals.AsList().Items
	}
	for _, it := range items {
		n = addSat(n, formatArgSize(it))
	}
	if n > r.lim.MaxValueBytes {
		return f, r.limit("a %% format would make about %d bytes, more than %d (Limits.MaxValueBytes)", n, r.lim.MaxValueBytes)
	}
	return f, nil
}

// formatArgSize bounds what Go's formatting prints for one argument of %.
func formatArgSize(v jinja.Value) int {
	switch {
	case v.IsString():
		return len(v.AsString())
	case v.IsList():
		return 64 * (v.AsList().Len() + 1)
	case v.IsDict():
		return 64 * (v.AsDict().Len() + 1)
	}
	return 64
}

// hookCallee checks a value about to be called, reporting one that cannot be called as
// the library does (it would print the whole value in its message).
func (r *render) hookCallee(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	if _, err := r.size(v, false); err != nil {
		return v, err
	}
	fn := v
	if fn.IsDict() {
		if call, ok := fn.AsDict().Get("__call__"); ok {
			fn = call
		}
	}
	if !fn.IsCallable() {
		name := "value"
		if len(args) > 1 && args[1].IsString() {
			name = args[1].AsString()
		}
		return v, fmt.Errorf("%s is not callable: %s", name, fn.String())
	}
	return v, nil
}

// hookCallOut wraps the callee of a call block so that what it returns, which the library
// writes out, counts as output.
func (r *render) hookCallOut(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := first(args)
	if err := r.check(); err != nil {
		return v, err
	}
	return jinja.NewCallable("call", func(a []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
		if !v.IsCallable() {
			return jinja.Undefined(), errors.New("call: expression is not callable")
		}
		res, err := v.AsCallable().Fn(a, kw)
		if err != nil {
			return res, err
		}
		return r.hookOutput([]jinja.Value{res}, nil)
	}), nil
}

// rangeFn is the library's range with the length of the list checked first.
func (r *render) rangeFn(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := r.check(); err != nil {
		return jinja.Undefined(), err
	}
	var start, stop, step int64
	switch len(args) {
	case 1:
		start, stop, step = 0, toInt64(args[0]), 1
	case 2:
		start, stop, step = toInt64(args[0]), toInt64(args[1]), 1
	case 3:
		start, stop, step = toInt64(args[0]), toInt64(args[1]), toInt64(args[2])
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var n uint64
	switch {
	case step > 0 && start < stop:
		n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		n = (uint64(start)-uint64(stop)-1)/(-uint64(step)) + 1
	}
	if n > uint64(r.lim.MaxIterations) {
		return jinja.Undefined(), r.limit("range of %d numbers, more than %d (Limits.MaxIterations)", n, r.lim.MaxIterations)
	}
	if err := r.addWork(int(n) * valueBytes); err != nil {
		return jinja.Undefined(), err
	}
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

// toInt64 converts a value to an integer as the library does.
func toInt64(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
		return 0
	case v.IsString():
		var n int64
		fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}

// clampInt converts n to an int, saturating.
func clampInt(n int64) int {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	if n < math.MinInt32 {
		return math.MinInt32
	}
	return int(n)
}
