package train

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
)

// program is a compiled graph whose inputs listed in inPlace are donated and their
// outputs written into their buffers where the backend can (backend.InPlaceMarker), so
// that state fed back from one execution to the next is not copied.
type program struct {
	backend compute.Backend
	g       *Graph
	inputs  []shapes.Shape
	inPlace map[int]int // input -> output
}

// compileProgram builds and compiles a program over inputs of the given shapes.
func compileProgram(b compute.Backend, name string, inputs []shapes.Shape, inPlace map[int]int,
	build func(inputs []*Node) []*Node) (*program, error) {
	g := NewGraph(b, name)
	p := &program{backend: b, g: g, inputs: inputs, inPlace: inPlace}
	err := exceptions.TryCatch[error](func() {
		nodes := make([]*Node, len(inputs))
		for i, s := range inputs {
			param := fmt.Sprintf("input_%d", i)
			if out, ok := inPlace[i]; ok {
				param += fmt.Sprintf("%s%d", backend.InPlaceMarker, out)
			}
			nodes[i] = Parameter(g, param, s)
		}
		outputs := build(nodes)
		for in, out := range inPlace {
			if !inputs[in].Equal(outputs[out].Shape()) {
				exceptions.Panicf("input %d %s is written in place by output %d %s", in, inputs[in], out, outputs[out].Shape())
			}
		}
		if err := g.Compile(outputs...); err != nil {
			panic(err)
		}
	})
	if err != nil {
		g.Finalize()
		return nil, fmt.Errorf("train: compiling %s: %w", name, err)
	}
	return p, nil
}

// run executes the program; the inputs it writes in place are consumed.
func (p *program) run(inputs []*tensors.Tensor) (outputs []*tensors.Tensor, err error) {
	if len(inputs) != len(p.inputs) {
		return nil, fmt.Errorf("train: program %s takes %d inputs, got %d", p.g.Name(), len(p.inputs), len(inputs))
	}
	buffers := make([]compute.Buffer, len(inputs))
	donate := make([]bool, len(inputs))
	for i, t := range inputs {
		if !t.Shape().Equal(p.inputs[i]) {
			return nil, fmt.Errorf("train: program %s input %d is %s, want %s", p.g.Name(), i, t.Shape(), p.inputs[i])
		}
		if _, ok := p.inPlace[i]; !ok {
			if buffers[i], err = t.Buffer(p.backend, 0); err != nil {
				return nil, fmt.Errorf("train: program %s input %d: %w", p.g.Name(), i, err)
			}
		}
	}
	for i := range p.inPlace {
		if buffers[i], err = inputs[i].DonateBuffer(p.backend, 0); err != nil {
			return nil, fmt.Errorf("train: program %s input %d: %w", p.g.Name(), i, err)
		}
		donate[i] = true
	}
	err = exceptions.TryCatch[error](func() { outputs = p.g.RunWithBuffers(buffers, donate, 0) })
	if err != nil {
		return nil, fmt.Errorf("train: running %s: %w", p.g.Name(), err)
	}
	return outputs, nil
}

func (p *program) finalize() { p.g.Finalize() }
