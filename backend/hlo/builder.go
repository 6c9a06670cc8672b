//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/stablehlo"
)

// Builder builds one program as a StableHLO module. It implements [compute.Builder].
type Builder struct {
	backend *Backend
	name    string
	module  *stablehlo.Builder
	main    *Function
	e4m3    []string // the int8 values of e4m3Values, retyped to f8E4M3FN in Compile
	// pending are the operations the model named (MarkKernel) whose Mul or Add has not
	// been built yet: Compile fails while any is.
	pending []request
}

var _ compute.Builder = (*Builder)(nil)

func newBuilder(b *Backend, name string) *Builder {
	bld := &Builder{backend: b, name: name, module: stablehlo.New(name)}
	bld.main = newFunction(bld, bld.module.Main(), nil)
	return bld
}

// Name returns the program's name.
func (b *Builder) Name() string { return b.name }

// Main returns the program's main function.
func (b *Builder) Main() compute.Function { return b.main }

// NewFunction fails: programs are one main function with its closures.
func (b *Builder) NewFunction(name string) (compute.Function, error) {
	return nil, fmt.Errorf("hlo: top-level function %q: %w", name, compute.ErrNotImplemented)
}

// OpShape returns the shape of a value.
func (b *Builder) OpShape(op compute.Value) (shapes.Shape, error) { return shapeOf(op) }

// DistributedSPMD fails: one device only.
func (b *Builder) DistributedSPMD(int) error {
	return fmt.Errorf("hlo: SPMD: %w", compute.ErrNotImplemented)
}

// DistributedAutoSharding fails: one device only.
func (b *Builder) DistributedAutoSharding(...compute.Mesh) error {
	return fmt.Errorf("hlo: auto-sharding: %w", compute.ErrNotImplemented)
}

// DeviceAssignment accepts device 0 only.
func (b *Builder) DeviceAssignment(devices ...compute.DeviceNum) error {
	if len(devices) != 1 || devices[0] != 0 {
		return fmt.Errorf("hlo: device assignment %v: only device 0 is supported", devices)
	}
	return nil
}

// Compile writes the module's StableHLO and compiles it on the plugin (a build-only
// backend keeps the text only).
func (b *Builder) Compile() (compute.Executable, error) {
	if !b.main.returned {
		return nil, errors.New("hlo: compiling before the main function returned")
	}
	if err := b.checkCompleted(); err != nil {
		return nil, fmt.Errorf("hlo: compiling %q: %w", b.name, err)
	}
	if err := b.main.aliasInPlace(); err != nil {
		return nil, fmt.Errorf("hlo: compiling %q: %w", b.name, err)
	}
	text, err := b.module.Build()
	if err == nil {
		text, err = retypeE4M3(text, b.e4m3)
	}
	if err != nil {
		return nil, fmt.Errorf("hlo: writing the StableHLO of %q: %w", b.name, err)
	}
	e := &Executable{backend: b.backend, name: b.name, program: text,
		inputNames: b.main.paramNames, inputs: b.main.paramShapes, outputs: b.main.outputs}
	if b.backend.buildOnly() {
		return e, nil
	}
	if b.backend.finalized {
		return nil, errors.New("hlo: compiling on a finalized backend")
	}
	e.loaded, err = b.backend.client.Compile().WithStableHLO(text).Done()
	if err != nil {
		return nil, fmt.Errorf("hlo: compiling %q: %w", b.name, err)
	}
	return e, nil
}
