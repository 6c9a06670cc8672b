package modelcore

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/compute/support/xslices"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/sharding"
)

// TensorParallel is a model's weights laid over several devices by a
// sharding.TensorParallel plan: each device holds its share of every layer's q/k/v and
// gate/up rows and o/down columns, the rest whole, and XLA's SPMD partitioner (GoMLX's
// auto-sharding) spreads its programs over them, adding the all-reduces after o and
// down. Its sessions ([TensorParallel.NewSession]) hold each device's key/value heads of
// the cache.
//
// The fused weights lie device after device (Placement.Order), as the forward pass reads
// them ([groupedQKV], [groupedSwiGLU]). Only dense layers split; a backend that cannot
// partition programs (the Go backend) is refused.
type TensorParallel struct {
	// Plan is how the weights and the cache are split.
	Plan *sharding.TensorParallel

	m *Model
	// mesh is the devices' mesh; nil lays the weights out as a mesh would, whole on
	// device 0, and runs its programs unpartitioned (tests of the layout on any backend).
	mesh    *distributed.DeviceMesh
	order   []*tensors.Tensor           // the model's parameters when made, as [Model.params]
	place   []sharding.Placement        // per parameter
	logical []shapes.Shape              // per parameter: its laid-out shape, whole
	specs   []*distributed.ShardingSpec // per parameter; nil without a mesh
	shards  [][]*tensors.Tensor         // [parameter][device]; a replicated one's device 0 is the model's

	programs programCache
	closed   atomic.Bool
}

// TensorParallel returns the model's weights laid over the first devices of its
// backend (see [TensorParallel]), made on first use and kept until the model closes or
// its linear layers change ([Model.Linears]); closing it frees it sooner. devices may
// be 1: one device runs the partitioned programs over a mesh of one. It refuses a shape
// the plan cannot split over devices, more devices than the backend addresses, a
// backend that cannot partition programs, and linear layers that are not dense.
func (m *Model) TensorParallel(devices int) (*TensorParallel, error) {
	return m.parallel.get(m, devices, true)
}

// TensorParallelLayout is [Model.TensorParallel] without the devices: the weights laid
// out for devices but whole on device 0, whose programs run unpartitioned, as XLA's
// partitioner sees them before it splits them. It runs on any backend, for tests of
// the layout.
func (m *Model) TensorParallelLayout(devices int) (*TensorParallel, error) {
	return m.parallel.get(m, devices, false)
}

// parallelLayouts keeps a model's tensor-parallel layouts by devices and partitioning.
type parallelLayouts struct {
	mu      sync.Mutex
	layouts map[layoutKey]*TensorParallel
}

// layoutKey names one of a model's layouts.
type layoutKey struct {
	devices     int
	partitioned bool
}

// get returns the layout, making it where there is none or it was closed.
func (c *parallelLayouts) get(m *Model, devices int, partitioned bool) (*TensorParallel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := layoutKey{devices, partitioned}
	if tp, ok := c.layouts[key]; ok && !tp.closed.Load() {
		return tp, nil
	}
	tp, err := m.tensorParallel(devices, partitioned)
	if err != nil {
		return nil, err
	}
	if c.layouts == nil {
		c.layouts = map[layoutKey]*TensorParallel{}
	}
	c.layouts[key] = tp
	return tp, nil
}

// closeAll closes every layout.
func (c *parallelLayouts) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tp := range c.layouts {
		_ = tp.Close()
	}
	c.layouts = nil
}

// tensorParallel is [Model.TensorParallel]; without partitioned, the weights are laid
// out whole on device 0 and the programs run unpartitioned.
func (m *Model) tensorParallel(devices int, partitioned bool) (*TensorParallel, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	c := m.Config
	plan, err := sharding.NewTensorParallel(sharding.Shape{Hidden: c.HiddenSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads,
		HeadDim: c.HeadDim, FFN: c.IntermediateSize}, devices)
	if err != nil {
		return nil, fmt.Errorf("model: tensor parallelism over %d devices: %w", devices, err)
	}
	tp := &TensorParallel{Plan: plan, m: m, order: m.params()}
	if partitioned {
		if tp.mesh, err = partitioningMesh(m.backend, devices); err != nil {
			return nil, fmt.Errorf("model: tensor parallelism over %d devices: %w", devices, err)
		}
	}
	if err := tp.plan(); err != nil {
		return nil, fmt.Errorf("model: tensor parallelism over %d devices: %w", devices, err)
	}
	if err := tp.load(); err != nil {
		_ = tp.Close()
		return nil, fmt.Errorf("model: tensor parallelism over %d devices: %w", devices, err)
	}
	return tp, nil
}

// partitioningMesh returns the mesh of devices of b, or why b cannot partition
// programs over them.
func partitioningMesh(b compute.Backend, devices int) (*distributed.DeviceMesh, error) {
	if have := b.NumDevices(); devices > have {
		return nil, fmt.Errorf("the backend %s addresses %d devices (go-xla's backend addresses all of its plugin's: "+
			"backend.ForDevices)", b.Name(), have)
	}
	mesh, err := sharding.Mesh(devices, sharding.TensorAxis)
	if err != nil {
		return nil, err
	}
	// A parameter is where a backend without auto-sharding refuses it.
	g := NewGraph(b, "tensor_parallel_probe")
	defer g.Finalize()
	err = g.SetAutoSharding(mesh)
	if err == nil {
		err = exceptions.TryCatch[error](func() {
			ShardedParameter(g, "x", shapes.Make(dtypes.Float32, devices), distributed.NewReplicatedShardingSpec(mesh))
		})
	}
	if err != nil {
		return nil, fmt.Errorf("the backend %s cannot partition programs over a mesh of devices "+
			"(go-xla's backend can: backend.ForDevices): %w", b.Name(), err)
	}
	return mesh, nil
}

// plan places every parameter: the decoder layers' dense projections as the plan says,
// the rest replicated.
func (tp *TensorParallel) plan() error {
	split := map[*tensors.Tensor]sharding.Placement{}
	for _, nl := range tp.m.Linears() {
		pl, err := tp.Plan.ForWeight(nl.Name + ".weight")
		if err != nil {
			return err
		}
		if pl.Axis == sharding.Replicated {
			continue
		}
		dense, ok := nl.Linear.(*Dense)
		if !ok {
			return fmt.Errorf("%s is a %T: only dense layers split", nl.Name, nl.Linear)
		}
		if dims := dense.Weight.Shape().Dimensions; len(dims) != 2 || dims[pl.Axis] != placementSize(pl) {
			return fmt.Errorf("%s's weight is %s: the plan splits %d along axis %d", nl.Name, dense.Weight.Shape(),
				placementSize(pl), pl.Axis)
		}
		split[dense.Weight] = pl
	}
	for _, t := range tp.order {
		pl, ok := split[t]
		if !ok {
			pl = sharding.Placement{Axis: sharding.Replicated}
		}
		shape := t.Shape().Clone()
		if ok {
			shape.Dimensions[pl.Axis] = len(pl.Order())
		}
		tp.place, tp.logical = append(tp.place, pl), append(tp.logical, shape)
		if tp.mesh != nil {
			spec, err := sharding.Spec(tp.mesh, shape.Rank(), pl.Axis)
			if err != nil {
				return err
			}
			tp.specs = append(tp.specs, spec)
		}
	}
	return nil
}

// placementSize is the length of the axis a placement splits: one past its largest
// index.
func placementSize(pl sharding.Placement) int {
	n := 0
	for _, i := range pl.Order() {
		n = max(n, i+1)
	}
	return n
}

// Devices is the number of devices its programs run on, the lists of inputs
// [Program.RunDevices] takes: the plan's, or one for a layout
// ([Model.TensorParallelLayout]).
func (tp *TensorParallel) Devices() int {
	if tp.mesh == nil {
		return 1
	}
	return tp.Plan.Devices
}

// load places each device's share of every parameter on it.
func (tp *TensorParallel) load() error {
	b, n := tp.m.backend, tp.Devices()
	for i, t := range tp.order {
		list := make([]*tensors.Tensor, n)
		tp.shards = append(tp.shards, list)
		pl := tp.place[i]
		if pl.Axis == sharding.Replicated && n == 1 {
			list[0] = t
			continue
		}
		data, err := hostBytes(t)
		if err != nil {
			return fmt.Errorf("reading weight %d %s: %w", i, t.Shape(), err)
		}
		order := pl.Order()
		for d := range n {
			if pl.Axis == sharding.Replicated && d == 0 {
				list[0] = t
				continue
			}
			shape, part := t.Shape(), data
			if pl.Axis != sharding.Replicated {
				per := len(order) / n
				shape, part = gatherAxis(shape, data, pl.Axis, order[d*per:(d+1)*per])
			}
			if list[d], err = tensors.FromRaw(b, compute.DeviceNum(d), shape, part); err != nil {
				return fmt.Errorf("placing weight %d %s on device %d: %w", i, shape, d, err)
			}
		}
	}
	return nil
}

// hostBytes returns a copy of t's bytes, leaving no host copy in t it did not have.
func hostBytes(t *tensors.Tensor) ([]byte, error) {
	local := t.IsLocal()
	var out []byte
	err := t.ConstBytes(func(data []byte) { out = slices.Clone(data) })
	if !local {
		t.FinalizeLocal()
	}
	return out, err
}

// gatherAxis returns the shape and bytes of the rank-2 tensor of shape s whose axis
// holds s's indices idx along it, in that order.
func gatherAxis(s shapes.Shape, data []byte, axis int, idx []int) (shapes.Shape, []byte) {
	out := s.Clone()
	out.Dimensions[axis] = len(idx)
	rows, cols, size := s.Dimensions[0], s.Dimensions[1], s.DType.Size()
	res := make([]byte, 0, out.ByteSize())
	if axis == 0 {
		for _, r := range idx {
			res = append(res, data[r*cols*size:(r+1)*cols*size]...)
		}
		return out, res
	}
	for r := range rows {
		row := data[r*cols*size : (r+1)*cols*size]
		for _, c := range idx {
			res = append(res, row[c*size:(c+1)*size]...)
		}
	}
	return out, res
}

// parameter makes the graph parameter of weight i, sharded by the plan.
func (tp *TensorParallel) parameter(g *Graph, name string, i int) *Node {
	if tp.specs == nil {
		return Parameter(g, name, tp.logical[i])
	}
	return ShardedParameter(g, name, tp.logical[i], tp.specs[i])
}

// weightSpec returns the sharding spec of the model's parameter t (nil for a layout
// without a mesh), and its shape laid out whole.
func (tp *TensorParallel) weightSpec(t *tensors.Tensor) (*distributed.ShardingSpec, shapes.Shape, error) {
	i := slices.Index(tp.order, t)
	if i < 0 {
		return nil, shapes.Shape{}, fmt.Errorf("model: tensor %s is not a parameter of the model", t.Shape())
	}
	var spec *distributed.ShardingSpec
	if tp.specs != nil {
		spec = tp.specs[i]
	}
	return spec, tp.logical[i], nil
}

// CacheShape is the shape of one layer's keys or values, [b, kvHeads, s, headDim]:
// the model's, or in a tensor-parallel program the cache laid out whole
// ([TensorParallel.CacheShape]).
func (w *Weights) CacheShape(batch, capacity int) shapes.Shape {
	if w.tp == nil {
		return w.Model.CacheShape(batch, capacity)
	}
	return shapes.Make(w.Model.DType, batch, w.tp.CacheKVHeads(), capacity, w.Model.Config.HeadDim)
}

// CacheShape is the shape of one layer's keys or values laid out whole: [b,
// Plan.CacheKVHeads(), s, headDim], split over the devices along axis 1.
func (tp *TensorParallel) CacheShape(batch, capacity int) shapes.Shape {
	c := tp.m.Config
	return shapes.Make(tp.m.DType, batch, tp.Plan.CacheKVHeads(), capacity, c.HeadDim)
}

// usable says why tp cannot run programs.
func (tp *TensorParallel) usable() error {
	if tp.closed.Load() {
		return fmt.Errorf("model: the tensor-parallel weights are closed: %w", ErrClosed)
	}
	return tp.m.usable()
}

// Close frees the devices' shares of the weights (not the model's own) and the
// compiled programs; closing it again does nothing.
func (tp *TensorParallel) Close() error {
	if tp == nil || tp.closed.Swap(true) {
		return nil
	}
	tp.programs.finalize()
	for i, list := range tp.shards {
		for _, t := range list {
			if t != nil && t != tp.order[i] {
				if err := t.FinalizeAll(); err != nil {
					return fmt.Errorf("model: freeing tensor-parallel weights: %w", err)
				}
			}
		}
	}
	tp.shards = nil
	return nil
}

// tpProgram is what [Model.compile] needs of a tensor-parallel program: the model laid
// out, and the axis each input and output is split along (sharding.Replicated: whole).
type tpProgram struct {
	tp                    *TensorParallel
	inputAxes, outputAxes []int
}

// setUp sets g's auto-sharding over the mesh and returns the inputs' specs and a
// function giving the outputs'; all nil without a mesh.
func (c *tpProgram) setUp(g *Graph, inputs []shapes.Shape) ([]*distributed.ShardingSpec,
	func([]*Node) ([]*distributed.ShardingSpec, error), error) {
	mesh := c.tp.mesh
	if mesh == nil {
		return nil, nil, nil
	}
	if len(c.inputAxes) != len(inputs) {
		return nil, nil, fmt.Errorf("%d split axes for %d inputs", len(c.inputAxes), len(inputs))
	}
	if err := g.SetAutoSharding(mesh); err != nil {
		return nil, nil, err
	}
	// GoMLX assigns devices itself only to meshes of two or more, and go-xla refuses to
	// compile a partitioned program without an assignment: a mesh of one needs it too.
	if err := g.SetDeviceAssignment(xslices.Iota(compute.DeviceNum(0), mesh.NumDevices())); err != nil {
		return nil, nil, err
	}
	specs := make([]*distributed.ShardingSpec, len(inputs))
	for i, s := range inputs {
		var err error
		if specs[i], err = sharding.Spec(mesh, s.Rank(), c.inputAxes[i]); err != nil {
			return nil, nil, fmt.Errorf("input %d: %w", i, err)
		}
	}
	outSpecs := func(outputs []*Node) ([]*distributed.ShardingSpec, error) {
		if len(c.outputAxes) != len(outputs) {
			return nil, fmt.Errorf("%d split axes for %d outputs", len(c.outputAxes), len(outputs))
		}
		out := make([]*distributed.ShardingSpec, len(outputs))
		for i, x := range outputs {
			var err error
			if out[i], err = sharding.Spec(mesh, x.Rank(), c.outputAxes[i]); err != nil {
				return nil, fmt.Errorf("output %d: %w", i, err)
			}
		}
		return out, nil
	}
	return specs, outSpecs, nil
}

// CachedProgram returns the program compiled under key over the laid-out weights,
// compiling it on first use: inputs are the logical (whole) shapes, input i split along
// inputAxes[i] and output j along outputAxes[j] (sharding.Replicated: whole on each
// device). Run it with [Program.RunDevices].
func (tp *TensorParallel) CachedProgram(key string, inputs []shapes.Shape, inputAxes, outputAxes []int, build BuildFunc,
	opts ...ProgramOption) (*Program, error) {
	if err := tp.usable(); err != nil {
		return nil, fmt.Errorf("%w (compiling %s)", err, key)
	}
	return tp.programs.get(key, func() (*Program, error) {
		return tp.m.compile(key, inputs, build, &tpProgram{tp: tp, inputAxes: inputAxes, outputAxes: outputAxes}, opts)
	})
}

// shardShape is the shape of input i on each device.
func (p *Program) shardShape(i int) shapes.Shape {
	if p.specs == nil {
		return p.inputs[i]
	}
	return p.specs[i].ShardShape(p.inputs[i])
}

// RunDevices executes a tensor-parallel program on each of its devices d with inputs[d]
// (device d's shares of the split inputs, and a copy each of the whole ones) and returns
// each device's outputs. Inputs the program updates in place are consumed.
func (p *Program) RunDevices(inputs [][]*tensors.Tensor) (outputs [][]*tensors.Tensor, err error) {
	if p.tp == nil {
		return nil, fmt.Errorf("model: program %s is not tensor-parallel: run it with Run", p.g.Name())
	}
	if err := p.tp.usable(); err != nil {
		return nil, fmt.Errorf("%w (running %s)", err, p.g.Name())
	}
	devices := p.tp.Devices()
	if len(inputs) != devices {
		return nil, fmt.Errorf("model: program %s runs on %d devices, got inputs for %d", p.g.Name(), devices, len(inputs))
	}
	n, nw := len(p.inputs), len(p.weights)
	for d, list := range inputs {
		if len(list) != n {
			return nil, fmt.Errorf("model: program %s takes %d inputs, got %d for device %d", p.g.Name(), n, len(list), d)
		}
		for i, t := range list {
			if want := p.shardShape(i); !t.Shape().Equal(want) {
				return nil, fmt.Errorf("model: program %s input %d on device %d has shape %s, want %s", p.g.Name(), i, d, t.Shape(), want)
			}
		}
	}
	b := p.model.backend
	buffers := make([]compute.Buffer, (n+nw)*devices)
	donate := make([]bool, len(buffers))
	for d, list := range inputs {
		device, base := compute.DeviceNum(d), d*(n+nw)
		for i, t := range list {
			if _, ok := p.inPlace[i]; !ok {
				if buffers[base+i], err = t.Buffer(b, device); err != nil {
					return nil, fmt.Errorf("model: program %s input %d on device %d: %w", p.g.Name(), i, d, err)
				}
			}
		}
		for i, shards := range p.tp.shards {
			if buffers[base+n+i], err = shards[d].Buffer(b, device); err != nil {
				return nil, fmt.Errorf("model: program %s weight %d on device %d: %w", p.g.Name(), i, d, err)
			}
		}
	}
	for d, list := range inputs {
		for i := range p.inPlace {
			if buffers[d*(n+nw)+i], err = list[i].DonateBuffer(b, compute.DeviceNum(d)); err != nil {
				return nil, fmt.Errorf("model: program %s input %d on device %d: %w", p.g.Name(), i, d, err)
			}
			donate[d*(n+nw)+i] = true
		}
	}
	var flat []*tensors.Tensor
	err = exceptions.TryCatch[error](func() { flat = p.g.RunWithBuffers(buffers, donate, 0) })
	if err != nil {
		return nil, fmt.Errorf("model: running %s: %w", p.g.Name(), err)
	}
	if len(flat)%devices != 0 {
		return nil, fmt.Errorf("model: %s returned %d outputs over %d devices", p.g.Name(), len(flat), devices)
	}
	per := len(flat) / devices
	for d := range devices {
		outputs = append(outputs, flat[d*per:(d+1)*per])
	}
	return outputs, nil
}
