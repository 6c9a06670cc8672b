package train

import (
	"context"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// evalSeed seeds the objective's random state at the start of every evaluation, so that
// evaluations of a random objective compare.
const evalSeed = 0x5eed

// EvalOptions configure [Evaluate].
type EvalOptions struct {
	// Batch rows of SeqLen targets per execution.
	Batch, SeqLen int
	// BOS is the id that starts every document.
	BOS int
	// Bytes is the size in bytes of the text the data encodes, for bits per byte; 0
	// leaves BitsPerByte 0.
	Bytes int64
	// MaxBatches, when positive, evaluates only the first batches (BitsPerByte then
	// stays 0: the bytes they cover are unknown).
	MaxBatches int
	// DType is the compute dtype; the zero value is the model's.
	DType dtypes.DType
	// Objective is the loss; nil is [NextToken].
	Objective Objective
	// Base, when not nil, are frozen weights of the model's trainable parameters' shapes
	// that the objective reads as Inputs.Base.
	Base []*tensors.Tensor
}

// Eval is the result of an evaluation.
type Eval struct {
	// Loss is Nats/Targets, the mean loss per scored target.
	Loss float64
	// Nats is the summed loss and Targets the number of scored targets.
	Nats    float64
	Targets int64
	// BitsPerByte is Nats/ln 2 over the bytes of the text (0 without them).
	BitsPerByte float64
}

// String formats the result for logs.
func (e Eval) String() string {
	s := fmt.Sprintf("loss %.4f nats/token over %d targets", e.Loss, e.Targets)
	if e.BitsPerByte > 0 {
		s += fmt.Sprintf(", %.4f bits/byte", e.BitsPerByte)
	}
	return s
}

// evaluator runs the objective without gradients over weights given as inputs.
type evaluator struct {
	opts EvalOptions
	prog *program
}

// newEvaluator compiles the evaluation program of m for weights of the given shapes.
func newEvaluator(m *modelcore.Model, weights []shapes.Shape, opts EvalOptions) (*evaluator, error) {
	if opts.Batch < 1 || opts.SeqLen < 1 {
		return nil, fmt.Errorf("train: evaluation batch %d and sequence length %d must be positive", opts.Batch, opts.SeqLen)
	}
	if opts.Objective == nil {
		opts.Objective = NextToken
	}
	if opts.DType == dtypes.InvalidDType {
		opts.DType = m.DType
	}
	n := len(weights)
	row := shapes.Make(dtypes.Int32, opts.Batch, opts.SeqLen+1)
	inputs := append(append([]shapes.Shape(nil), weights...), RNGStateShape, row, row, row)
	for _, b := range opts.Base {
		inputs = append(inputs, b.Shape())
	}
	prog, err := compileProgram(m.Backend(), "train_eval", inputs, nil, func(in []*Node) []*Node {
		objIn := &Inputs{Model: m, Weights: m.BindWeights(in[:n]), DType: opts.DType,
			Tokens: in[n+1], Segments: in[n+2], Positions: in[n+3], BOS: opts.BOS, rng: in[n],
			Step: Const(in[0].Graph(), int32(EvalStep))}
		if opts.Base != nil {
			objIn.Base = m.BindWeights(in[n+4:])
		}
		loss := opts.Objective(objIn)
		return []*Node{loss.Nats, loss.Targets}
	})
	if err != nil {
		return nil, err
	}
	return &evaluator{opts: opts, prog: prog}, nil
}

// run evaluates the weights over data.
func (e *evaluator) run(ctx context.Context, weights []*tensors.Tensor, data *Tokens) (Eval, error) {
	rng, err := RNGStateFromSeed(evalSeed)
	if err != nil {
		return Eval{}, fmt.Errorf("train: %w", err)
	}
	var nats float64
	var targets int64
	batches := 0
	for rows := range evalRows(data, e.opts.SeqLen, e.opts.Batch, int32(e.opts.BOS)) {
		if err := ctx.Err(); err != nil {
			return Eval{}, err
		}
		if e.opts.MaxBatches > 0 && batches == e.opts.MaxBatches {
			break
		}
		batches++
		inputs := append(append(append(append([]*tensors.Tensor(nil), weights...), rng), rows.tensors()...), e.opts.Base...)
		out, err := e.prog.run(inputs)
		if err != nil {
			return Eval{}, err
		}
		n, err := tensors.CopyFlatData[float32](out[0])
		if err != nil {
			return Eval{}, fmt.Errorf("train: reading the evaluation: %w", err)
		}
		c, err := tensors.CopyFlatData[float32](out[1])
		if err != nil {
			return Eval{}, fmt.Errorf("train: reading the evaluation: %w", err)
		}
		nats += float64(n[0])
		targets += int64(c[0])
		for _, x := range out {
			_ = x.FinalizeAll()
		}
	}
	res := Eval{Nats: nats, Targets: targets}
	if targets > 0 {
		res.Loss = nats / float64(targets)
	}
	if e.opts.Bytes > 0 && e.opts.MaxBatches <= 0 {
		res.BitsPerByte = nats / math.Ln2 / float64(e.opts.Bytes)
	}
	return res, nil
}

// Evaluate runs the objective over data with m's own weights.
func Evaluate(ctx context.Context, m *model.Model, data *Tokens, opts EvalOptions) (Eval, error) {
	if data.Vocab > m.Config.VocabSize {
		return Eval{}, fmt.Errorf("train: the data's vocabulary of %d exceeds the model's %d", data.Vocab, m.Config.VocabSize)
	}
	core := modelcore.Of(m)
	params, err := core.TrainableParams()
	if err != nil {
		return Eval{}, err
	}
	weights := make([]*tensors.Tensor, len(params))
	shapesOf := make([]shapes.Shape, len(params))
	for i, p := range params {
		weights[i], shapesOf[i] = p.Tensor, p.Tensor.Shape()
	}
	e, err := newEvaluator(core, shapesOf, opts)
	if err != nil {
		return Eval{}, err
	}
	defer e.prog.finalize()
	return e.run(ctx, weights, data)
}

// Evaluate runs the trainer's objective over data with its current master weights,
// in rows of its batch and sequence length, and bytes the size of the text data
// encodes (0 if unknown); maxBatches, when positive, bounds the batches.
func (t *Trainer) Evaluate(ctx context.Context, data *Tokens, bytes int64, maxBatches int) (Eval, error) {
	if data.Vocab > t.m.Config.VocabSize {
		return Eval{}, fmt.Errorf("train: the data's vocabulary of %d exceeds the model's %d", data.Vocab, t.m.Config.VocabSize)
	}
	if t.eval == nil {
		shapesOf := make([]shapes.Shape, len(t.masters))
		for i, m := range t.masters {
			shapesOf[i] = m.Shape()
		}
		e, err := newEvaluator(t.core, shapesOf, EvalOptions{Batch: t.cfg.Batch, SeqLen: t.cfg.SeqLen, BOS: t.cfg.BOS,
			DType: t.dtype, Objective: t.cfg.Objective, Base: t.base()})
		if err != nil {
			return Eval{}, err
		}
		t.eval = e
	}
	t.eval.opts.Bytes, t.eval.opts.MaxBatches = bytes, maxBatches
	return t.eval.run(ctx, t.masters, data)
}
