package modelcore

import (
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/sharding"
)

// Weights are the model's parameters as nodes of one graph under construction, in the
// main function so that While-loop closures can read them.
type Weights struct {
	Model       *Model
	order       []*tensors.Tensor // the model's parameters, in graph-parameter order
	nodes       map[*tensors.Tensor]*Node
	Embed       *Node
	RopeInvFreq *Node
	// tp, when set, is the plan of a tensor-parallel program: the fused projections'
	// rows are laid out device after device ([TensorParallel]), and the forward pass
	// splits them accordingly.
	tp *sharding.TensorParallel
}

// bind returns the weights with nodes (one per parameter, in order) in place of w's.
func (w *Weights) bind(nodes []*Node) *Weights {
	b := &Weights{Model: w.Model, order: w.order, nodes: make(map[*tensors.Tensor]*Node, len(nodes)), tp: w.tp}
	for i, t := range w.order {
		b.nodes[t] = nodes[i]
	}
	b.Embed, b.RopeInvFreq = b.nodes[w.Model.Embed], b.nodes[w.Model.ropeInvFreq]
	return b
}

// LoopFunc is the condition or body of a [Weights.While]: it receives the weights and
// the loop's state and invariants as nodes of the closure being built.
type LoopFunc func(w *Weights, state, invariants []*Node) []*Node

// While runs body while cond (returning one boolean scalar) holds, inside one device
// loop, for loops that read the model's weights. XLA's loop bodies cannot read nodes of
// the enclosing function, so the weights and the invariants travel through the loop
// as state, unchanged. It returns the final state.
//
// GoMLX caches scalar constants per graph, not per function: the enclosing function
// must not create (through Scalar, MulScalar, Zeros, …) a constant the closures also
// use; [graph.Const] is never cached and is safe.
func (w *Weights) While(state, invariants []*Node, cond, body LoopFunc) []*Node {
	ns, ni := len(state), len(invariants)
	all := append(append(append([]*Node(nil), state...), invariants...), w.Nodes(w.order)...)
	split := func(g *Graph) (*Weights, []*Node, []*Node) {
		params := make([]*Node, len(all))
		for i, x := range all {
			params[i] = Parameter(g, "", x.Shape())
		}
		return w.bind(params[ns+ni:]), params[:ns], params[ns : ns+ni]
	}
	g := state[0].Graph()
	condFn := NewClosure(g, func(g *Graph) []*Node {
		return cond(split(g))
	})
	bodyFn := NewClosure(g, func(g *Graph) []*Node {
		wb, st, inv := split(g)
		next := body(wb, st, inv)
		return append(append(next, inv...), wb.Nodes(wb.order)...)
	})
	return While(condFn, bodyFn, all...)[:ns]
}

// Node returns the graph node of one of the model's device tensors.
func (w *Weights) Node(t *tensors.Tensor) *Node {
	n, ok := w.nodes[t]
	if !ok {
		exceptions.Panicf("model: tensor %s is not a parameter of this graph", t.Shape())
	}
	return n
}

// Nodes returns the graph nodes of several device tensors.
func (w *Weights) Nodes(ts []*tensors.Tensor) []*Node {
	out := make([]*Node, len(ts))
	for i, t := range ts {
		out[i] = w.Node(t)
	}
	return out
}

// Program is a graph compiled for fixed input shapes. Its parameters are the caller's
// inputs followed by the model's weights, which Run feeds from the device.
type Program struct {
	model   *Model
	g       *Graph
	inputs  []shapes.Shape
	weights []*tensors.Tensor
	inPlace map[int]int // input -> the output written into its buffer (see InPlace)
	// tp, when set, is the tensor-parallel model whose weight shards the program reads
	// (run with [Program.RunDevices]); specs are its inputs' sharding specs, nil when
	// the program is not partitioned.
	tp    *TensorParallel
	specs []*distributed.ShardingSpec
}

// BuildFunc builds a graph's outputs from the model's weights and its inputs.
type BuildFunc func(w *Weights, inputs []*Node) []*Node

// ProgramOption configures [Model.Compile] and [Model.CachedProgram].
type ProgramOption func(*Program)

// InPlace makes output take the device memory of input, which must have its shape:
// [Program.Run] donates that input (its tensor is consumed), and our backend writes the
// output into it (backend.InPlaceMarker; others may reuse donated memory as they see
// fit). A loop that feeds a program's outputs back as its inputs then keeps its buffers
// from one execution to the next, so that XLA need not update its CUDA graphs for new
// addresses each time (about 4 ms per execution of the decoder's loop on the H200).
func InPlace(input, output int) ProgramOption {
	return func(p *Program) { p.inPlace[input] = output }
}

// Compile builds and compiles a program over the given input shapes.
func (m *Model) Compile(name string, inputs []shapes.Shape, build BuildFunc, opts ...ProgramOption) (*Program, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("%w (compiling %s)", err, name)
	}
	return m.compile(name, inputs, build, nil, opts)
}

// compile builds and compiles a program: over the model's weights when tp is nil; else
// over tp's weights, partitioned by tp's mesh where it has one (see [TensorParallel]).
func (m *Model) compile(name string, inputs []shapes.Shape, build BuildFunc, tp *tpProgram, opts []ProgramOption) (*Program, error) {
	g := NewGraph(m.backend, name)
	p := &Program{model: m, g: g, inputs: inputs, weights: m.params(), inPlace: map[int]int{}}
	for _, o := range opts {
		o(p)
	}
	var outSpecs func(outputs []*Node) ([]*distributed.ShardingSpec, error)
	if tp != nil {
		p.tp, p.weights = tp.tp, tp.tp.order
		var err error
		if p.specs, outSpecs, err = tp.setUp(g, inputs); err != nil {
			g.Finalize()
			return nil, fmt.Errorf("model: compiling %s over %d devices: %w", name, tp.tp.Plan.Devices, err)
		}
	}
	err := exceptions.TryCatch[error](func() {
		inputNodes := make([]*Node, len(inputs))
		for i, s := range inputs {
			param := fmt.Sprintf("input_%d", i)
			if out, ok := p.inPlace[i]; ok {
				param += fmt.Sprintf("%s%d", backend.InPlaceMarker, out)
			}
			if p.specs != nil {
				inputNodes[i] = ShardedParameter(g, param, s, p.specs[i])
			} else {
				inputNodes[i] = Parameter(g, param, s)
			}
		}
		w := &Weights{Model: m, order: p.weights, nodes: make(map[*tensors.Tensor]*Node, len(p.weights))}
		for i, t := range p.weights {
			if p.tp != nil {
				w.nodes[t] = p.tp.parameter(g, fmt.Sprintf("weight_%d", i), i)
				continue
			}
			w.nodes[t] = Parameter(g, fmt.Sprintf("weight_%d", i), t.Shape())
		}
		w.Embed, w.RopeInvFreq = w.nodes[m.Embed], w.nodes[m.ropeInvFreq]
		if p.tp != nil {
			w.tp = p.tp.Plan
		}
		outputs := build(w, inputNodes)
		if err := p.checkInPlace(outputs); err != nil {
			panic(err)
		}
		if outSpecs == nil {
			if err := g.Compile(outputs...); err != nil {
				panic(err)
			}
			return
		}
		specs, err := outSpecs(outputs)
		if err == nil {
			err = g.CompileWithSharding(outputs, specs)
		}
		if err != nil {
			panic(err)
		}
	})
	if err != nil {
		g.Finalize()
		return nil, fmt.Errorf("model: compiling %s: %w", name, err)
	}
	return p, nil
}

// checkInPlace checks the InPlace pairs against the inputs and the built outputs.
func (p *Program) checkInPlace(outputs []*Node) error {
	taken := map[int]int{}
	for in, out := range p.inPlace {
		if in < 0 || in >= len(p.inputs) || out < 0 || out >= len(outputs) {
			return fmt.Errorf("InPlace(%d, %d): the program has %d inputs and %d outputs", in, out, len(p.inputs), len(outputs))
		}
		if !p.inputs[in].Equal(outputs[out].Shape()) {
			return fmt.Errorf("InPlace(%d, %d): input %s, output %s", in, out, p.inputs[in], outputs[out].Shape())
		}
		if other, dup := taken[out]; dup {
			return fmt.Errorf("InPlace(%d, %d) and InPlace(%d, %d) share an output", other, out, in, out)
		}
		taken[out] = in
	}
	return nil
}

// CachedProgram returns the program compiled under key, compiling it with [Model.Compile]
// on first use. Keys must identify what the build computes, its input shapes and its
// options.
func (m *Model) CachedProgram(key string, inputs []shapes.Shape, build BuildFunc, opts ...ProgramOption) (*Program, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("%w (compiling %s)", err, key)
	}
	return m.programs.get(key, func() (*Program, error) { return m.Compile(key, inputs, build, opts...) })
}

// Run executes the program. The outputs stay on the device until read. Inputs the
// program updates in place ([InPlace]) are consumed: their tensors keep no device
// buffer afterwards (nor any value, unless they also hold one on the host).
func (p *Program) Run(inputs ...*tensors.Tensor) (outputs []*tensors.Tensor, err error) {
	if err := p.model.usable(); err != nil {
		return nil, fmt.Errorf("%w (running %s)", err, p.g.Name())
	}
	if p.tp != nil {
		return nil, fmt.Errorf("model: program %s is tensor-parallel: run it with RunDevices", p.g.Name())
	}
	if len(inputs) != len(p.inputs) {
		return nil, fmt.Errorf("model: program %s takes %d inputs, got %d", p.g.Name(), len(p.inputs), len(inputs))
	}
	b := p.model.backend
	for i, t := range inputs {
		if !t.Shape().Equal(p.inputs[i]) {
			return nil, fmt.Errorf("model: program %s input %d has shape %s, want %s", p.g.Name(), i, t.Shape(), p.inputs[i])
		}
	}
	buffers := make([]compute.Buffer, len(inputs)+len(p.weights))
	donate := make([]bool, len(buffers))
	for i, t := range inputs {
		// Donated last, so that an error reading another input or a weight leaves every
		// input as it was.
		if _, ok := p.inPlace[i]; !ok {
			if buffers[i], err = t.Buffer(b, 0); err != nil {
				return nil, fmt.Errorf("model: program %s input %d: %w", p.g.Name(), i, err)
			}
		}
	}
	for i, t := range p.weights {
		if buffers[len(inputs)+i], err = t.Buffer(b, 0); err != nil {
			return nil, fmt.Errorf("model: program %s weight %d: %w", p.g.Name(), i, err)
		}
	}
	for i := range p.inPlace {
		if buffers[i], err = inputs[i].DonateBuffer(b, 0); err != nil {
			return nil, fmt.Errorf("model: program %s input %d: %w", p.g.Name(), i, err)
		}
		donate[i] = true
	}
	err = exceptions.TryCatch[error](func() { outputs = p.g.RunWithBuffers(buffers, donate, 0) })
	if err != nil {
		return nil, fmt.Errorf("model: running %s: %w", p.g.Name(), err)
	}
	return outputs, nil
}

// Graph returns the compiled graph, e.g. to inspect it.
func (p *Program) Graph() *Graph { return p.g }

// programCache keeps compiled programs by a key describing what they compute.
type programCache struct {
	mu       sync.Mutex
	programs map[string]*Program
}

// get returns the cached program for key, compiling it on first use.
func (c *programCache) get(key string, compile func() (*Program, error)) (*Program, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.programs[key]; ok {
		return p, nil
	}
	p, err := compile()
	if err != nil {
		return nil, err
	}
	if c.programs == nil {
		c.programs = map[string]*Program{}
	}
	c.programs[key] = p
	return p, nil
}

func (c *programCache) finalize() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.programs {
		p.g.Finalize()
	}
	c.programs = nil
}
