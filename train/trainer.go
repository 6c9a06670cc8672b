package train

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/hostdata"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/sharding"
	"github.com/blockdiff/blockdiff/model"
)

// Config configures a [Trainer].
type Config struct {
	// DType is the compute dtype, BFloat16 or Float32; the zero value is
	// model.DefaultDType of the model's backend. Master weights and optimizer state are
	// float32 whatever it is.
	DType dtypes.DType
	// Batch rows of SeqLen targets each per step (rows hold SeqLen+1 tokens).
	Batch, SeqLen int
	// Schedule of the learning rate; its Total is normally the run's number of steps.
	Schedule Schedule
	// AdamW's constants; the zero value is [DefaultAdamW].
	AdamW AdamW
	// Clip bounds the global norm of the gradients (scaled down to it when above, as
	// PyTorch's clip_grad_norm_ does); 0 does not clip.
	Clip float64
	// Seed draws the data order and the objective's random state.
	Seed uint64
	// Objective is the loss; nil is [NextToken].
	Objective Objective
	// BOS is the id that starts every document.
	BOS int
	// FrozenBase passes the model's own weights, which training never changes, to the
	// objective as Inputs.Base (e.g. to keep a converted model close to its base).
	FrozenBase bool
	// Devices spreads each step over the backend's first Devices devices, data-parallel
	// (package internal/sharding): each runs Batch/Devices rows, the weights and
	// optimizer state are replicated and XLA all-reduces the gradients. Batch must be a
	// multiple of it, and the backend must address that many devices and partition
	// programs (go-xla's does). 0 or 1 is one device, the plain program.
	Devices int
}

// Trainer trains a model: it holds the float32 master weights and AdamW's moments on
// the device, the step counter, the data sampler and the objective's random state.
type Trainer struct {
	cfg     Config
	dtype   dtypes.DType
	m       *model.Model
	core    *modelcore.Model // m's implementation
	backend compute.Backend
	params  []modelcore.Param
	sampler *Sampler

	masters, moment1, moment2 []*tensors.Tensor
	stats                     *tensors.Tensor // [3] float32: sums of losses, of gradient norms, and steps since the last read
	rng                       *tensors.Tensor // the objective's random state
	step                      int

	prog *program
	eval *evaluator

	plan sharding.DataParallel
	// replicas[d-1] is device d's copy of the replicated state for d ≥ 1, in the step
	// program's input order (masters, moments, statistics, random state), and
	// baseReplicas[d-1] its copy of the frozen base weights; the fields above are
	// device 0's.
	replicas, baseReplicas [][]*tensors.Tensor
}

// New returns a trainer of m (whose weights, read once, are the initial master weights,
// and whose structure the steps use: m must stay open while the trainer is used) over
// the training data. It compiles the step program.
func New(m *model.Model, data *Tokens, cfg Config) (*Trainer, error) {
	if cfg.Batch < 1 || cfg.SeqLen < 1 {
		return nil, fmt.Errorf("train: batch %d and sequence length %d must be positive", cfg.Batch, cfg.SeqLen)
	}
	if cfg.Schedule.Total < 1 || cfg.Schedule.Warmup < 0 || cfg.Schedule.Peak <= 0 || cfg.Schedule.Min < 0 {
		return nil, fmt.Errorf("train: invalid schedule %+v", cfg.Schedule)
	}
	if cfg.Clip < 0 {
		return nil, fmt.Errorf("train: clip %g must not be negative", cfg.Clip)
	}
	plan, err := sharding.NewDataParallel(max(cfg.Devices, 1), cfg.Batch)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if have := modelcore.Of(m).Backend().NumDevices(); plan.Devices > have {
		return nil, fmt.Errorf("train: %d devices asked for, the backend %s addresses %d", plan.Devices, modelcore.Of(m).Backend().Name(), have)
	}
	if data.Vocab > m.Config.VocabSize {
		return nil, fmt.Errorf("train: the data's vocabulary of %d exceeds the model's %d", data.Vocab, m.Config.VocabSize)
	}
	if cfg.BOS < 0 || cfg.BOS >= m.Config.VocabSize {
		return nil, fmt.Errorf("train: BOS %d is outside the vocabulary of %d", cfg.BOS, m.Config.VocabSize)
	}
	if cfg.AdamW == (AdamW{}) {
		cfg.AdamW = DefaultAdamW
	}
	if cfg.Objective == nil {
		cfg.Objective = NextToken
	}
	core := modelcore.Of(m)
	dtype := cfg.DType
	if dtype == dtypes.InvalidDType {
		dtype = model.DefaultDType(core.Backend())
	}
	if dtype != dtypes.Float32 && dtype != dtypes.BFloat16 {
		return nil, fmt.Errorf("train: compute dtype must be Float32 or BFloat16, got %s", dtype)
	}
	params, err := core.TrainableParams()
	if err != nil {
		return nil, err
	}
	sampler, err := NewSampler(data, cfg.SeqLen, cfg.BOS, cfg.Seed)
	if err != nil {
		return nil, err
	}
	t := &Trainer{cfg: cfg, dtype: dtype, m: m, core: core, backend: core.Backend(), params: params, sampler: sampler, plan: plan}
	for _, p := range params {
		values, err := hostdata.Float32s(p.Tensor)
		if err != nil {
			return nil, fmt.Errorf("train: reading %s: %w", p.Name, err)
		}
		dims := p.Tensor.Shape().Dimensions
		t.masters = append(t.masters, tensors.FromFlatDataAndDimensions(values, dims...))
		t.moment1 = append(t.moment1, tensors.FromShape(shapes.Make(dtypes.Float32, dims...)))
		t.moment2 = append(t.moment2, tensors.FromShape(shapes.Make(dtypes.Float32, dims...)))
	}
	t.stats = tensors.FromShape(shapes.Make(dtypes.Float32, 3))
	if t.rng, err = RNGStateFromSeed(int64(cfg.Seed)); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := t.replicate(); err != nil {
		return nil, err
	}
	if err := t.compileStep(); err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

// Config returns the trainer's configuration, defaults filled in.
func (t *Trainer) Config() Config { return t.cfg }

// Steps returns the number of steps taken (restored ones included).
func (t *Trainer) Steps() int { return t.step }

// Model returns the model whose structure the trainer uses.
func (t *Trainer) Model() *model.Model { return t.m }

// rowShape is the shape of a batch's tokens, segments and positions.
func (t *Trainer) rowShape(rows int) shapes.Shape {
	return shapes.Make(dtypes.Int32, rows, t.cfg.SeqLen+1)
}

// compileStep compiles the step program. Its inputs are the master weights, the first
// and second moments (P each), the statistics, the random state, the step number and
// the batch's tokens, segments and positions; its outputs the new masters, moments,
// statistics and random state, the first four written in place.
func (t *Trainer) compileStep() error {
	n := len(t.params)
	var inputs []shapes.Shape
	inPlace := map[int]int{}
	for range 3 {
		for _, m := range t.masters {
			inPlace[len(inputs)] = len(inputs)
			inputs = append(inputs, m.Shape())
		}
	}
	inPlace[len(inputs)] = len(inputs)
	inputs = append(inputs, t.stats.Shape(), t.rng.Shape(), shapes.Make(dtypes.Int32), t.rowShape(t.cfg.Batch),
		t.rowShape(t.cfg.Batch), t.rowShape(t.cfg.Batch))
	for _, b := range t.base() {
		inputs = append(inputs, b.Shape())
	}
	splitAxes := make([]int, len(inputs))
	for i := range splitAxes {
		splitAxes[i] = t.plan.Axis(stepInputKind(i, n))
	}
	prog, err := compileSharded(t.backend, "train_step", inputs, inPlace, t.plan.Devices, splitAxes, func(in []*Node) []*Node {
		masters, m1, m2 := in[:n], in[n:2*n], in[2*n:3*n]
		stats, rng, step := in[3*n], in[3*n+1], in[3*n+2]
		objIn := &Inputs{Model: t.core, Weights: t.core.BindWeights(masters), DType: t.dtype,
			Tokens: in[3*n+3], Segments: in[3*n+4], Positions: in[3*n+5], BOS: t.cfg.BOS, Step: step, rng: rng}
		if t.cfg.FrozenBase {
			objIn.Base = t.core.BindWeights(in[3*n+6:])
		}
		loss := t.cfg.Objective(objIn)
		grads := Gradient(loss.Value, masters...)
		grads, norm := clipByGlobalNorm(grads, t.cfg.Clip)
		g := step.Graph()
		lr := t.cfg.Schedule.node(step)
		count := Add(ConvertDType(step, dtypes.Float32), Const(g, float32(1)))
		out := make([]*Node, 3*n, 3*n+2)
		for i, p := range masters {
			out[i], out[n+i], out[2*n+i] = t.cfg.AdamW.update(p, grads[i], m1[i], m2[i], lr, count, t.params[i].Decays)
		}
		stats = Add(stats, Stack([]*Node{loss.Value, norm, Const(g, float32(1))}, 0))
		return append(out, stats, objIn.rng)
	})
	if err != nil {
		return err
	}
	t.prog = prog
	return nil
}

// clipByGlobalNorm returns the gradients scaled by min(1, clip/(‖g‖ + 1e-6)), as
// PyTorch's clip_grad_norm_ scales them, and their global norm ‖g‖ before; clip 0 leaves
// them as they are.
func clipByGlobalNorm(grads []*Node, clip float64) ([]*Node, *Node) {
	g := grads[0].Graph()
	sumSquares := Const(g, float32(0))
	for _, gr := range grads {
		sumSquares = Add(sumSquares, ReduceAllSum(Square(gr)))
	}
	norm := Sqrt(sumSquares)
	if clip <= 0 {
		return grads, norm
	}
	scale := Min(Const(g, float32(1)), Div(Const(g, float32(clip)), Add(norm, Const(g, float32(1e-6)))))
	out := make([]*Node, len(grads))
	for i, gr := range grads {
		out[i] = Mul(gr, scale)
	}
	return out, norm
}

// Step takes one training step on the next rows of the data. It reads nothing back
// from the device. After an error the trainer's state is lost.
func (t *Trainer) Step() error {
	rows := t.sampler.Next(t.cfg.Batch)
	n := len(t.params)
	inputs := make([][]*tensors.Tensor, t.plan.Devices)
	for d := range inputs {
		list := make([]*tensors.Tensor, 0, 3*n+6)
		if d == 0 {
			list = append(append(append(list, t.masters...), t.moment1...), t.moment2...)
			list = append(list, t.stats, t.rng)
		} else {
			list = append(list, t.replicas[d-1]...)
		}
		list = append(list, tensors.FromScalar(int32(t.step)))
		list = append(list, rows.slice(t.plan.RowRange(d)).tensors()...)
		if d == 0 {
			list = append(list, t.base()...)
		} else {
			list = append(list, t.baseReplicas[d-1]...)
		}
		inputs[d] = list
	}
	outs, err := t.prog.runDevices(inputs)
	if err != nil {
		return err
	}
	out := outs[0]
	copy(t.masters, out[:n])
	copy(t.moment1, out[n:2*n])
	copy(t.moment2, out[2*n:3*n])
	old := t.rng
	t.stats, t.rng = out[3*n], out[3*n+1]
	if old != t.rng {
		_ = old.FinalizeAll()
	}
	for d := 1; d < t.plan.Devices; d++ {
		state := t.replicas[d-1]
		if old := state[3*n+1]; old != outs[d][3*n+1] {
			_ = old.FinalizeAll()
		}
		copy(state, outs[d][:3*n+2])
	}
	t.step++
	return nil
}

// base returns the model's own weights when the objective reads them (Config.FrozenBase).
func (t *Trainer) base() []*tensors.Tensor {
	if !t.cfg.FrozenBase {
		return nil
	}
	out := make([]*tensors.Tensor, len(t.params))
	for i, p := range t.params {
		out[i] = p.Tensor
	}
	return out
}

// tensors returns the rows' tokens, segments and positions as [rows, width] tensors.
func (r *Rows) tensors() []*tensors.Tensor {
	return []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(r.Tokens, r.Rows, r.Width),
		tensors.FromFlatDataAndDimensions(r.Segments, r.Rows, r.Width),
		tensors.FromFlatDataAndDimensions(r.Positions, r.Rows, r.Width),
	}
}

// Stats are training statistics averaged over the steps since the last read.
type Stats struct {
	// Steps averaged over.
	Steps int
	// Loss is the mean objective value, GradNorm the mean global gradient norm (before
	// clipping).
	Loss, GradNorm float64
	// LR is the learning rate of the last step.
	LR float64
}

// ReadStats reads the statistics accumulated since the last read back from the device
// and resets them. It waits for the steps taken so far to finish.
func (t *Trainer) ReadStats() (Stats, error) {
	values, err := tensors.CopyFlatData[float32](t.stats)
	if err != nil {
		return Stats{}, fmt.Errorf("train: reading statistics: %w", err)
	}
	_ = t.stats.FinalizeAll()
	t.stats = tensors.FromShape(shapes.Make(dtypes.Float32, 3))
	stats := 3 * len(t.params)
	for _, state := range t.replicas {
		_ = state[stats].FinalizeAll()
		state[stats] = tensors.FromShape(t.stats.Shape())
	}
	s := Stats{Steps: int(values[2]), LR: t.cfg.Schedule.LR(max(t.step-1, 0))}
	if s.Steps > 0 {
		s.Loss, s.GradNorm = float64(values[0])/float64(s.Steps), float64(values[1])/float64(s.Steps)
	}
	return s, nil
}

// Weights returns the current master weights as parameters of the model (float32
// tensors, owned by the trainer: valid until the next step).
func (t *Trainer) Weights() []modelcore.Param {
	out := make([]modelcore.Param, len(t.params))
	for i, p := range t.params {
		out[i] = modelcore.Param{Name: p.Name, Tensor: t.masters[i], Decays: p.Decays}
	}
	return out
}

// Close frees the trainer's device memory and programs. The model is not closed.
func (t *Trainer) Close() error {
	var errs []error
	lists := append([][]*tensors.Tensor{t.masters, t.moment1, t.moment2, {t.stats, t.rng}}, t.replicas...)
	for _, list := range append(lists, t.baseReplicas...) {
		for _, x := range list {
			errs = append(errs, x.FinalizeAll())
		}
	}
	if t.prog != nil {
		t.prog.finalize()
	}
	if t.eval != nil {
		t.eval.prog.finalize()
	}
	return errors.Join(errs...)
}
