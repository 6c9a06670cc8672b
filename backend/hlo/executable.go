//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/pjrt"
)

// Executable is a compiled program. It implements [compute.Executable].
type Executable struct {
	backend    *Backend
	name       string
	program    []byte // the StableHLO text
	inputNames []string
	inputs     []shapes.Shape
	outputs    []shapes.Shape
	loaded     *pjrt.LoadedExecutable // nil on a build-only backend, and once finalized
}

var _ compute.Executable = (*Executable)(nil)

// Program returns the StableHLO text of an executable of this backend.
func Program(e compute.Executable) ([]byte, error) {
	x, ok := e.(*Executable)
	if !ok {
		return nil, fmt.Errorf("hlo: %T is not an executable of the hlo backend", e)
	}
	return x.program, nil
}

// Finalize frees the compiled program.
func (e *Executable) Finalize() {
	if e.loaded != nil && !e.backend.finalized {
		_ = e.loaded.Destroy()
	}
	e.loaded = nil
}

// Inputs returns the parameters' names and shapes.
func (e *Executable) Inputs() (names []string, inputShapes []shapes.Shape) {
	return e.inputNames, e.inputs
}

// Outputs returns the outputs' shapes.
func (e *Executable) Outputs() []shapes.Shape { return e.outputs }

// Execute runs the program on device 0. Donated inputs are consumed: the plugin may
// reuse their memory for outputs, and they are invalid afterwards.
func (e *Executable) Execute(inputs []compute.Buffer, donate []bool, defaultDevice compute.DeviceNum) ([]compute.Buffer, error) {
	if err := checkDevice(defaultDevice); err != nil {
		return nil, err
	}
	if e.backend.buildOnly() {
		return nil, fmt.Errorf("executing %q: %w", e.name, ErrBuildOnly)
	}
	if e.loaded == nil {
		return nil, fmt.Errorf("hlo: executing %q after Finalize", e.name)
	}
	if len(inputs) != len(e.inputs) {
		return nil, fmt.Errorf("hlo: %q takes %d inputs, got %d", e.name, len(e.inputs), len(inputs))
	}
	if donate != nil && len(donate) != len(inputs) {
		return nil, fmt.Errorf("hlo: %q: %d donate flags for %d inputs", e.name, len(donate), len(inputs))
	}
	bufs := make([]*Buffer, len(inputs))
	pbs := make([]*pjrt.Buffer, len(inputs))
	for i, in := range inputs {
		b, ok := in.(*Buffer)
		if !ok || b == nil || b.backend != e.backend {
			return nil, fmt.Errorf("hlo: %q: input #%d is not a buffer of this backend", e.name, i)
		}
		if err := b.valid(); err != nil {
			return nil, fmt.Errorf("hlo: %q: input #%d (%s): %w", e.name, i, e.inputNames[i], err)
		}
		if !b.shape.Equal(e.inputs[i]) {
			return nil, fmt.Errorf("hlo: %q: input #%d (%s) is %s, want %s", e.name, i, e.inputNames[i], b.shape, e.inputs[i])
		}
		bufs[i], pbs[i] = b, b.device
	}
	run := e.loaded.Execute(pbs...).OnDevice(e.backend.device)
	if donate != nil {
		run = run.SetDonate(donate)
	}
	outs, err := run.Done()
	// pjrt destroys donated inputs once the execution is launched.
	for i, d := range donate {
		if d && err == nil {
			bufs[i].device = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hlo: executing %q: %w", e.name, err)
	}
	if len(outs) != len(e.outputs) {
		return nil, errors.Join(fmt.Errorf("hlo: %q returned %d outputs, want %d", e.name, len(outs), len(e.outputs)),
			destroyAll(outs))
	}
	results := make([]compute.Buffer, len(outs))
	for i, o := range outs {
		results[i] = &Buffer{backend: e.backend, shape: e.outputs[i], device: o}
	}
	return results, nil
}

// destroyAll frees buffers of a failed execution.
func destroyAll(bufs []*pjrt.Buffer) error {
	var errs []error
	for _, b := range bufs {
		errs = append(errs, b.Destroy())
	}
	return errors.Join(errs...)
}
