package train

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// Objective builds the loss of one batch in the step (and evaluation) graph from the
// model's training forward and the batch's nodes.
type Objective func(in *Inputs) Loss

// Loss is what an [Objective] returns, float32 scalars.
type Loss struct {
	// Value is minimised.
	Value *Node
	// Nats is the summed cross-entropy over the scored targets, and Targets their
	// number: evaluation reports Nats/Targets and bits per byte from their totals.
	Nats, Targets *Node
}

// Inputs are an [Objective]'s inputs: the model, its weights bound to the step's
// parameters, and one batch of rows (see [Rows]).
type Inputs struct {
	// Model is the trained model's implementation and Weights its weights as nodes of
	// the step, which [Inputs.Forward] runs.
	Model   *modelcore.Model
	Weights *modelcore.Weights
	// DType is the compute dtype.
	DType dtypes.DType
	// Tokens, Segments and Positions are [b, s+1] int32, as in [Rows].
	Tokens, Segments, Positions *Node
	// BOS is the id that starts each document.
	BOS int
	// Step is the step number, an int32 scalar (in evaluation, [EvalStep]), for objectives
	// that change with training (a curriculum).
	Step *Node
	// Base holds the model's own weights, frozen (the trainer's starting point), when the
	// trainer's Config.FrozenBase asks for them; nil otherwise.
	Base *modelcore.Weights

	rng *Node // the random state, advanced by Uniform
}

// TrainingWindow is the input of [Inputs.Forward]: Tokens [b, w] int32 at explicit
// Positions [b, w] int32 (which set the rotary angles; they may repeat) under an
// explicit attention visibility Visible, [b, w, w] or [w, w] bool (query i attends to
// key j; every query must see a key), reading no cache. LogitIndices [b, r] int32, when
// set, selects the positions whose logits are computed.
type TrainingWindow = modelcore.TrainingWindow

// EvalStep is the step number evaluation programs give objectives: past any curriculum.
const EvalStep = 1 << 30

// Forward runs the model's differentiable training forward in the compute dtype and
// returns the float32 logits [b, r, v] (r the selected positions, all w by default).
func (in *Inputs) Forward(win TrainingWindow) *Node {
	win.DType = in.DType
	return in.Model.ForwardTraining(in.Weights, win)
}

// Uniform returns float32 values of the given dimensions, uniform in [0, 1), from the
// step's random state, which the step carries to the next (and evaluation starts from
// a fixed seed).
func (in *Inputs) Uniform(dims ...int) *Node {
	var values *Node
	in.rng, values = RandomUniform(in.rng, shapes.Make(dtypes.Float32, dims...))
	return values
}

// NextToken is the autoregressive objective: the mean cross-entropy of each token given
// the tokens before it in its document, over rows' first s tokens predicting their next.
// Targets that are pads or start a document (a BOS) are not scored; attention does
// not cross documents.
func NextToken(in *Inputs) Loss {
	s := in.Tokens.Shape().Dimensions[1] - 1
	first := func(x *Node) *Node { return SliceAxis(x, 1, AxisRange(0, s)) }
	next := func(x *Node) *Node { return SliceAxis(x, 1, AxisRange(1, s+1)) }
	tokens, targets := first(in.Tokens), next(in.Tokens)
	segments := first(in.Segments)
	logits := in.Forward(TrainingWindow{
		Tokens:    MaxScalar(tokens, 0), // pads read any row; nothing sees them but pads
		Positions: first(in.Positions),
		Visible:   DocumentCausal(segments),
	})
	scored := LogicalAnd(GreaterOrEqual(targets, ScalarZero(targets.Graph(), dtypes.Int32)), Equal(next(in.Segments), segments))
	return MeanCrossEntropy(logits, targets, scored)
}

// DocumentCausal is the visibility [b, w, w] of causal attention within documents: query
// i sees key j ≤ i of its own segment (segments [b, w] as in [Rows]).
func DocumentCausal(segments *Node) *Node {
	w := segments.Shape().Dimensions[1]
	same := Equal(InsertAxes(segments, -1), InsertAxes(segments, 1))
	return LogicalAnd(same, InsertAxes(modelcore.CausalVisibility(segments.Graph(), w), 0))
}

// MeanCrossEntropy is the loss of logits [b, w, v] (float32) against targets [b, w]
// int32 where scored [b, w] holds: the mean over scored positions of
// logsumexp(logits) − logits[target].
func MeanCrossEntropy(logits, targets, scored *Node) Loss {
	g := logits.Graph()
	v := logits.Shape().Dimensions[2]
	top := StopGradient(ReduceAndKeep(logits, ReduceMax, -1))
	lse := Add(Squeeze(top, -1), Log(ReduceSum(Exp(Sub(logits, top)), -1)))
	isTarget := Equal(Iota(g, shapes.Make(dtypes.Int32, 1, 1, v), 2), InsertAxes(targets, -1))
	picked := ReduceSum(Where(isTarget, logits, ZerosLike(logits)), -1)
	zero := ZerosLike(lse)
	nats := ReduceAllSum(Where(scored, Sub(lse, picked), zero))
	count := ReduceAllSum(Where(scored, OnesLike(lse), zero))
	return Loss{Value: Div(nats, Max(count, Const(g, float32(1)))), Nats: nats, Targets: count}
}
