package train

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/sharding"
)

// program is a compiled graph whose inputs listed in inPlace are donated and their
// outputs written into their buffers where the backend can (backend.InPlaceMarker), so
// that state fed back from one execution to the next is not copied.
//
// A program of several devices is one graph partitioned by XLA (GoMLX's auto-sharding
// over a one-axis mesh): each input is split along its axis of splitAxes or replicated,
// each output replicated, and every device runs it on its own buffers.
type program struct {
	backend compute.Backend
	g       *Graph
	inputs  []shapes.Shape // the logical shapes, whole
	inPlace map[int]int    // input -> output
	devices int
	specs   []*distributed.ShardingSpec // per input; nil on one device
}

// compileProgram builds and compiles a program over inputs of the given shapes.
func compileProgram(b compute.Backend, name string, inputs []shapes.Shape, inPlace map[int]int,
	build func(inputs []*Node) []*Node) (*program, error) {
	return compileSharded(b, name, inputs, inPlace, 1, nil, build)
}

// compileSharded builds and compiles a program over inputs of the given (logical)
// shapes on devices: one device runs the plain program; more run it partitioned, input
// i split along splitAxes[i] (or sharding.Replicated) and every output replicated.
func compileSharded(b compute.Backend, name string, inputs []shapes.Shape, inPlace map[int]int, devices int,
	splitAxes []int, build func(inputs []*Node) []*Node) (*program, error) {
	g := NewGraph(b, name)
	p := &program{backend: b, g: g, inputs: inputs, inPlace: inPlace, devices: max(devices, 1)}
	var replicated *distributed.ShardingSpec
	if p.devices > 1 {
		if len(splitAxes) != len(inputs) {
			g.Finalize()
			return nil, fmt.Errorf("train: compiling %s: %d split axes for %d inputs", name, len(splitAxes), len(inputs))
		}
		mesh, err := sharding.Mesh(p.devices, sharding.BatchAxis)
		if err == nil {
			err = g.SetAutoSharding(mesh)
		}
		for i := 0; err == nil && i < len(inputs); i++ {
			var spec *distributed.ShardingSpec
			if spec, err = sharding.Spec(mesh, inputs[i].Rank(), splitAxes[i]); err == nil {
				p.specs = append(p.specs, spec)
			}
		}
		if err != nil {
			g.Finalize()
			return nil, fmt.Errorf("train: compiling %s over %d devices: %w", name, p.devices, err)
		}
		replicated = distributed.NewReplicatedShardingSpec(mesh)
	}
	err := exceptions.TryCatch[error](func() {
		nodes := make([]*Node, len(inputs))
		for i, s := range inputs {
			param := fmt.Sprintf("input_%d", i)
			if out, ok := inPlace[i]; ok {
				param += fmt.Sprintf("%s%d", backend.InPlaceMarker, out)
			}
			if p.specs != nil {
				nodes[i] = ShardedParameter(g, param, s, p.specs[i])
			} else {
				nodes[i] = Parameter(g, param, s)
			}
		}
		outputs := build(nodes)
		for in, out := range inPlace {
			if !inputs[in].Equal(outputs[out].Shape()) {
				exceptions.Panicf("input %d %s is written in place by output %d %s", in, inputs[in], out, outputs[out].Shape())
			}
		}
		var outSpecs []*distributed.ShardingSpec
		if replicated != nil {
			outSpecs = make([]*distributed.ShardingSpec, len(outputs))
			for i := range outSpecs {
				outSpecs[i] = replicated
			}
		}
		if err := g.CompileWithSharding(outputs, outSpecs); err != nil {
			panic(err)
		}
	})
	if err != nil {
		g.Finalize()
		return nil, fmt.Errorf("train: compiling %s: %w", name, err)
	}
	return p, nil
}

// run executes a program of one device; the inputs it writes in place are consumed.
func (p *program) run(inputs []*tensors.Tensor) ([]*tensors.Tensor, error) {
	outputs, err := p.runDevices([][]*tensors.Tensor{inputs})
	if err != nil {
		return nil, err
	}
	return outputs[0], nil
}

// shardShape returns the shape of input i on each device.
func (p *program) shardShape(i int) shapes.Shape {
	if p.specs == nil {
		return p.inputs[i]
	}
	return p.specs[i].ShardShape(p.inputs[i])
}

// runDevices executes the program on each device d with inputs[d] (device d's shards
// and replicas) and returns each device's outputs; the inputs it writes in place are
// consumed.
func (p *program) runDevices(inputs [][]*tensors.Tensor) (outputs [][]*tensors.Tensor, err error) {
	if len(inputs) != p.devices {
		return nil, fmt.Errorf("train: program %s runs on %d devices, got inputs for %d", p.g.Name(), p.devices, len(inputs))
	}
	n := len(p.inputs)
	buffers := make([]compute.Buffer, n*p.devices)
	donate := make([]bool, n*p.devices)
	for d, list := range inputs {
		if len(list) != n {
			return nil, fmt.Errorf("train: program %s takes %d inputs, got %d for device %d", p.g.Name(), n, len(list), d)
		}
		for i, t := range list {
			if want := p.shardShape(i); !t.Shape().Equal(want) {
				return nil, fmt.Errorf("train: program %s input %d on device %d is %s, want %s", p.g.Name(), i, d, t.Shape(), want)
			}
		}
	}
	for d, list := range inputs {
		device := compute.DeviceNum(d)
		for i, t := range list {
			if _, ok := p.inPlace[i]; !ok {
				if buffers[d*n+i], err = t.Buffer(p.backend, device); err != nil {
					return nil, fmt.Errorf("train: program %s input %d on device %d: %w", p.g.Name(), i, d, err)
				}
			}
		}
		for i := range p.inPlace {
			if buffers[d*n+i], err = list[i].DonateBuffer(p.backend, device); err != nil {
				return nil, fmt.Errorf("train: program %s input %d on device %d: %w", p.g.Name(), i, d, err)
			}
			donate[d*n+i] = true
		}
	}
	var flat []*tensors.Tensor
	err = exceptions.TryCatch[error](func() { flat = p.g.RunWithBuffers(buffers, donate, 0) })
	if err != nil {
		return nil, fmt.Errorf("train: running %s: %w", p.g.Name(), err)
	}
	if len(flat)%p.devices != 0 {
		return nil, fmt.Errorf("train: %s returned %d outputs over %d devices", p.g.Name(), len(flat), p.devices)
	}
	per := len(flat) / p.devices
	for d := range p.devices {
		outputs = append(outputs, flat[d*per:(d+1)*per])
	}
	return outputs, nil
}

func (p *program) finalize() { p.g.Finalize() }
