//go:build cgo && !noxla

package hlo

import (
	"fmt"
	"reflect"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/compute/notimplemented"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"
	xshapes "github.com/gomlx/go-xla/types/shapes"
)

// Function is the main function of a program or a closure of it (a While's condition
// or body, a Sort's comparator). It implements [compute.Function]; operations this
// package does not implement return [compute.ErrNotImplemented] through the embedded
// notimplemented.Function, so that GoMLX decomposes the fused ones.
type Function struct {
	notimplemented.Function

	builder *Builder
	fn      *stablehlo.Function
	parent  *Function // nil for main

	// captured holds this closure's references to values of enclosing functions.
	captured map[*value]*stablehlo.Value
	// params are the parameters' names and shapes, in order.
	paramNames  []string
	paramShapes []shapes.Shape
	outputs     []shapes.Shape // set by Return
	returned    bool
	// placements are the kernels.TokenInCache that write a one-token window into its
	// cache, which our attention kernel may take over, and the kernels.WindowInCache, in
	// the order the model named them (tritonPlace, place.go).
	placements []placement
}

var _ compute.Function = (*Function)(nil)

// value is a compute.Value of this backend: a StableHLO value and the function that
// made it.
type value struct {
	fn     *Function
	v      *stablehlo.Value
	shape  shapes.Shape
	origin *origin // what our kernels know of how it was made (fold.go), nil for most
}

// notImplemented is the error of every operation the package leaves out.
func notImplemented(op compute.OpType) error {
	return fmt.Errorf("hlo: %s: %w", op, compute.ErrNotImplemented)
}

func newFunction(b *Builder, fn *stablehlo.Function, parent *Function) *Function {
	return &Function{Function: notimplemented.Function{ErrFn: notImplemented}, builder: b, fn: fn, parent: parent}
}

// toXLA converts a GoMLX shape to go-xla's; fromXLA converts back. Dynamic axes are not
// supported (Capabilities says DynamicShapesNone), so dimensions carry over.
func toXLA(s shapes.Shape) xshapes.Shape   { return xshapes.Make(s.DType, s.Dimensions...) }
func fromXLA(s xshapes.Shape) shapes.Shape { return shapes.Make(s.DType, s.Dimensions...) }

// wrap makes a StableHLO value of f a compute.Value.
func (f *Function) wrap(v *stablehlo.Value) *value {
	return &value{fn: f, v: v, shape: fromXLA(v.Shape())}
}

// Name returns the function's name, "" for closures.
func (f *Function) Name() string {
	if f.parent != nil {
		return ""
	}
	return f.fn.Name
}

// Builder returns the builder f belongs to.
func (f *Function) Builder() compute.Builder { return f.builder }

// Parent returns the enclosing function of a closure, nil for main.
func (f *Function) Parent() compute.Function {
	if f.parent == nil {
		return nil
	}
	return f.parent
}

// Closure returns a new closure of f.
func (f *Function) Closure() (compute.Function, error) {
	if err := f.checkOpen(); err != nil {
		return nil, err
	}
	return newFunction(f.builder, f.fn.Closure(), f), nil
}

// checkOpen fails once f has returned.
func (f *Function) checkOpen() error {
	if f.returned {
		return fmt.Errorf("hlo: function %q already returned", f.fn.Name)
	}
	return nil
}

// isAncestor reports whether a encloses f.
func (f *Function) isAncestor(a *Function) bool {
	for p := f.parent; p != nil; p = p.parent {
		if p == a {
			return true
		}
	}
	return false
}

// operands returns the StableHLO values of vs as seen from f: its own, or references to
// values of enclosing functions (a region reads the SSA values around it).
func (f *Function) operands(vs ...compute.Value) ([]*stablehlo.Value, error) {
	if err := f.checkOpen(); err != nil {
		return nil, err
	}
	out := make([]*stablehlo.Value, len(vs))
	for i, cv := range vs {
		v, ok := cv.(*value)
		if !ok || v == nil {
			return nil, fmt.Errorf("hlo: operand #%d is a %T, not a value of this backend", i, cv)
		}
		switch {
		case v.fn == f:
			out[i] = v.v
		case f.isAncestor(v.fn):
			ref, ok := f.captured[v]
			if !ok {
				var err error
				if ref, err = f.fn.UseParentValue(v.v); err != nil {
					return nil, fmt.Errorf("hlo: reading a value of an enclosing function: %w", err)
				}
				if f.captured == nil {
					f.captured = map[*value]*stablehlo.Value{}
				}
				f.captured[v] = ref
			}
			out[i] = ref
		default:
			return nil, fmt.Errorf("hlo: operand #%d belongs to a function that does not enclose this one", i)
		}
	}
	return out, nil
}

// shapeOf returns the shape of a value of this backend.
func shapeOf(cv compute.Value) (shapes.Shape, error) {
	v, ok := cv.(*value)
	if !ok || v == nil {
		return shapes.Invalid(), fmt.Errorf("hlo: %T is not a value of this backend", cv)
	}
	return v.shape, nil
}

// Shape returns the shape of v.
func (f *Function) Shape(v compute.Value) (shapes.Shape, error) { return shapeOf(v) }

// Parameter adds an input to f. Names are kept for [compute.Executable.Inputs]; the
// StableHLO arguments get generated names, which are always valid and unique.
func (f *Function) Parameter(name string, shape shapes.Shape, sharding *compute.ShardingSpec) (compute.Value, error) {
	if err := f.checkOpen(); err != nil {
		return nil, err
	}
	if sharding != nil {
		return nil, fmt.Errorf("hlo: parameter %q: sharding: %w", name, compute.ErrNotImplemented)
	}
	if shape.IsDynamic() {
		return nil, fmt.Errorf("hlo: parameter %q has dynamic shape %s; only static shapes are supported", name, shape)
	}
	v, err := f.fn.Input(toXLA(shape))
	if err != nil {
		return nil, fmt.Errorf("hlo: parameter %q: %w", name, err)
	}
	f.paramNames = append(f.paramNames, name)
	f.paramShapes = append(f.paramShapes, shape)
	return f.wrap(v), nil
}

// Constant adds a constant of flat's values, shaped by dims.
func (f *Function) Constant(flat any, dims ...int) (compute.Value, error) {
	if err := f.checkOpen(); err != nil {
		return nil, err
	}
	fv := reflect.ValueOf(flat)
	if fv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("hlo: Constant: flat is a %T, not a slice", flat)
	}
	dtype := dtypes.FromGoType(fv.Type().Elem())
	if dtype == dtypes.InvalidDType {
		return nil, fmt.Errorf("hlo: Constant: unsupported element type in %T", flat)
	}
	shape := shapes.Make(dtype, dims...)
	if shape.Size() != fv.Len() {
		return nil, fmt.Errorf("hlo: Constant: %d values for shape %s", fv.Len(), shape)
	}
	v, err := f.fn.ConstantFromFlatAndShape(flat, toXLA(shape))
	if err != nil {
		return nil, fmt.Errorf("hlo: Constant %s: %w", shape, err)
	}
	return f.wrap(v), nil
}

// scalar adds a constant scalar x of dtype.
func (f *Function) scalar(dtype dtypes.DType, x float64) (*stablehlo.Value, error) {
	var c any
	switch dtype {
	case dtypes.Bool:
		c = x != 0
	case dtypes.BFloat16:
		c = bfloat16.FromFloat64(x)
	case dtypes.Float16:
		c = float16.FromFloat32(float32(x))
	default:
		t := dtype.GoType()
		if t == nil || !reflect.TypeOf(x).ConvertibleTo(t) {
			return nil, fmt.Errorf("hlo: no scalar constant of %s", dtype)
		}
		c = reflect.ValueOf(x).Convert(t).Interface()
	}
	return f.fn.ConstantFromScalar(c)
}

// Return sets f's outputs; f can no longer change.
func (f *Function) Return(outputs []compute.Value, shardings []*compute.ShardingSpec) error {
	if len(shardings) > 0 {
		return fmt.Errorf("hlo: output sharding: %w", compute.ErrNotImplemented)
	}
	vs, err := f.operands(outputs...)
	if err != nil {
		return err
	}
	if err := f.fn.Return(vs...); err != nil {
		return fmt.Errorf("hlo: Return: %w", err)
	}
	f.returned = true
	f.outputs = make([]shapes.Shape, len(outputs))
	for i, o := range outputs {
		f.outputs[i], _ = shapeOf(o) // operands checked them
	}
	return nil
}

// closureOf checks that c is a returned closure of f's builder and makes it a region of
// f. GoMLX creates every closure from main, so a While inside a closure takes closures
// whose StableHLO parent must move to that closure; values they read from main stay
// visible there.
func (f *Function) closureOf(c compute.Function, what string) (*Function, error) {
	cf, ok := c.(*Function)
	if !ok || cf == nil || cf.builder != f.builder || cf.parent == nil {
		return nil, fmt.Errorf("hlo: the %s is not a closure of this program", what)
	}
	if !cf.returned {
		return nil, fmt.Errorf("hlo: the %s has not returned", what)
	}
	if cf.parent != f {
		if !f.isAncestor(cf.parent) {
			return nil, fmt.Errorf("hlo: the %s was made in a function that does not enclose its use", what)
		}
		cf.parent, cf.fn.Parent = f, f.fn
	}
	return cf, nil
}

// While runs body on the state while cond holds.
func (f *Function) While(cond, body compute.Function, initialState ...compute.Value) ([]compute.Value, error) {
	c, err := f.closureOf(cond, "While condition")
	if err != nil {
		return nil, err
	}
	b, err := f.closureOf(body, "While body")
	if err != nil {
		return nil, err
	}
	init, err := f.operands(initialState...)
	if err != nil {
		return nil, err
	}
	outs, err := stablehlo.While(c.fn, b.fn, init...)
	if err != nil {
		return nil, fmt.Errorf("hlo: While: %w", err)
	}
	return f.wrapAll(outs), nil
}

// Sort sorts inputs along axis with comparator.
func (f *Function) Sort(comparator compute.Function, axis int, isStable bool, inputs ...compute.Value) ([]compute.Value, error) {
	c, err := f.closureOf(comparator, "Sort comparator")
	if err != nil {
		return nil, err
	}
	vs, err := f.operands(inputs...)
	if err != nil {
		return nil, err
	}
	outs, err := stablehlo.Sort(c.fn, axis, isStable, vs...)
	if err != nil {
		return nil, fmt.Errorf("hlo: Sort: %w", err)
	}
	return f.wrapAll(outs), nil
}

func (f *Function) wrapAll(vs []*stablehlo.Value) []compute.Value {
	out := make([]compute.Value, len(vs))
	for i, v := range vs {
		out[i] = f.wrap(v)
	}
	return out
}

// Identity returns x: StableHLO values are immutable.
func (f *Function) Identity(x compute.Value) (compute.Value, error) {
	if _, err := f.operands(x); err != nil {
		return nil, err
	}
	return x, nil
}
