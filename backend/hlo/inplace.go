//go:build cgo && !noxla

package hlo

import (
	"fmt"
	"strconv"
	"strings"
)

// InPlaceMarker in a main parameter's name lends the parameter's buffer to an output: a
// parameter named NAME + InPlaceMarker + K (e.g. "input_3~output=5") becomes StableHLO's
// tf.aliasing_output = K. When the caller donates it, output K is written into its
// memory, so a program that updates state and is fed its own outputs keeps every buffer
// address from one execution to the next: XLA then need not update its command buffers
// (CUDA graphs) for new addresses, which cost ~4 ms per execution of the decoder's loop
// on the H200. Undonated, XLA copies the parameter into a new buffer
// first. Parameter and output must have the same shape.
const InPlaceMarker = "~output="

// aliasInPlace marks main's parameters named with [InPlaceMarker] as aliases of their
// outputs.
func (f *Function) aliasInPlace() error {
	taken := map[int]string{}
	for i, name := range f.paramNames {
		_, k, ok := strings.Cut(name, InPlaceMarker)
		if !ok {
			continue
		}
		out, err := strconv.Atoi(k)
		if err != nil || out < 0 || out >= len(f.outputs) {
			return fmt.Errorf("parameter %q names no output of the %d", name, len(f.outputs))
		}
		if !f.paramShapes[i].Equal(f.outputs[out]) {
			return fmt.Errorf("parameter %q is %s, but output %d is %s", name, f.paramShapes[i], out, f.outputs[out])
		}
		if other, dup := taken[out]; dup {
			return fmt.Errorf("parameters %q and %q both name output %d", other, name, out)
		}
		taken[out] = name
		in := f.fn.Inputs[i]
		if in.Attributes == nil {
			in.Attributes = map[string]any{}
		}
		in.Attributes["tf.aliasing_output"] = int32(out)
	}
	return nil
}
