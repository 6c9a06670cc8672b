package diffusion

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// pick chooses candidate tokens [b, n] int32 and their confidences [b, n] float32 from
// logits [b, n, v] float32, as the spec says: the mask token is never a candidate;
// greedy takes the argmax (ties: the lower id) with confidence softmax(logits)[x̂];
// sampling draws from the temperature-scaled, top-k and top-p filtered distribution,
// with confidence its probability there. counters [b, n] uint32 and the seed make a
// position's draw depend only on its row's own progress, so a batch samples as one by
// one. bad [b] marks the rows whose logits hold a value that is not finite (NaN or
// infinite, from corrupt weights): their tokens mean nothing.
func (l *loop) pick(p params, logits, counters *Node) (tokens, conf, bad *Node) {
	g := logits.Graph()
	vocab := logits.Shape().Dimensions[2]
	bad = ReduceLogicalOr(LogicalNot(IsFinite(logits)), -1, -2)
	negInf := Infinity(g, dtypes.Float32, -1)
	if l.mask >= 0 {
		ids := Iota(g, shapes.Make(dtypes.Int32, 1, 1, vocab), 2)
		isMask := BroadcastToShape(Equal(ids, Scalar(g, dtypes.Int32, l.mask)), logits.Shape())
		logits = Where(isMask, negInf, logits)
	}
	if !l.sampling {
		tokens, conf = greedy(logits)
		return tokens, conf, bad
	}
	logits = filter(Div(logits, p.temperature), p.topK, p.topP, l.topK, l.topP)
	// Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits).
	u := uniform(p.seed, counters, vocab)
	tokens, _ = greedy(Add(logits, Neg(Log(Neg(Log(u))))))
	conf = Gather(Softmax(logits, -1), indicesFor(tokens))
	return tokens, conf, bad
}

// greedy returns argmax tokens (ties: the lower id) and their softmax probability.
func greedy(logits *Node) (tokens, conf *Node) {
	g := logits.Graph()
	vocab := logits.Shape().Dimensions[2]
	ids := BroadcastToShape(Iota(g, shapes.Make(dtypes.Int32, 1, 1, vocab), 2), logits.Shape())
	best := ReduceAndKeep(logits, ReduceMax, -1)
	tokens = ReduceMin(Where(Equal(logits, best), ids, Scalar(g, dtypes.Int32, vocab)), -1)
	// softmax(l)[argmax] = 1 / Σ exp(l - max).
	conf = Inverse(ReduceSum(Exp(Sub(logits, best)), -1))
	return tokens, conf
}

// filter keeps the tokens that pass top-k and top-p, as transformers' warpers do: top-k
// keeps the k most likely (k 0: all); top-p then keeps the most likely tokens whose
// preceding probability mass is below p (the most likely always stays). Ties at a cut
// are kept. Cuts are found by bisection rather than sorting: GoMLX builds a sort's
// comparator in the main function, which a sort inside a loop body cannot use.
func filter(logits, topK, topP *Node, useTopK, useTopP bool) *Node {
	g := logits.Graph()
	vocab := logits.Shape().Dimensions[2]
	negInf := Infinity(g, dtypes.Float32, -1)
	// Probabilities order tokens as logits do; tokens whose probability underflows to
	// zero could never be drawn anyway.
	probs := Softmax(logits, -1)
	keys := Bitcast(probs, dtypes.Int32) // ordered like the (non-negative) floats
	if useTopK {
		k := Where(GreaterThan(topK, ZerosLike(topK)), MinScalar(topK, vocab), Scalar(g, dtypes.Int32, vocab))
		kth := largestKey(keys, func(t *Node) *Node { // at least k tokens at or above t
			return GreaterOrEqual(ReduceSum(ConvertDType(GreaterOrEqual(keys, t), dtypes.Int32), -1), k)
		})
		keep := GreaterOrEqual(keys, kth)
		logits = Where(keep, logits, negInf)
		probs = Softmax(logits, -1)
		keys = Bitcast(probs, dtypes.Int32)
	}
	if useTopP {
		cut := largestKey(keys, func(t *Node) *Node { // the tokens at or above t hold at least p
			mass := ReduceSum(Where(GreaterOrEqual(keys, t), probs, ZerosLike(probs)), -1)
			return GreaterOrEqual(mass, topP)
		})
		// p of 1 (or a sum that rounds below it) keeps everything.
		all := GreaterOrEqual(topP, OnesLike(topP))
		keep := LogicalOr(BroadcastToShape(all, keys.Shape()), GreaterOrEqual(keys, cut))
		logits = Where(keep, logits, negInf)
	}
	return logits
}

// largestKey finds, per row of keys [b, n, v] (non-negative float bit patterns), the
// largest t in [0, +Inf] for which holds(t [b, n, 1]) ([b, n] bool) is true, by
// bisection over the 2^31 bit patterns; holds must be true at 0 and monotone.
func largestKey(keys *Node, holds func(t *Node) *Node) *Node {
	g := keys.Graph()
	dims := keys.Shape().Dimensions
	shape := shapes.Make(dtypes.Int32, dims[0], dims[1], 1)
	lo := Zeros(g, shape)
	hi := BroadcastToShape(Scalar(g, dtypes.Int32, 0x7f800000), shape)
	for range 31 {
		mid := Add(lo, DivScalar(AddScalar(Sub(hi, lo), 1), 2))
		ok := InsertAxes(holds(mid), -1)
		lo = Where(ok, mid, lo)
		hi = Where(ok, hi, SubScalar(mid, 1))
	}
	return lo
}

// indicesFor turns tokens [b, n] into Gather indices [b, n, 3] over [b, n, v].
func indicesFor(tokens *Node) *Node {
	g := tokens.Graph()
	shape := tokens.Shape()
	return Stack([]*Node{Iota(g, shape, 0), Iota(g, shape, 1), tokens}, -1)
}

// uniform returns values in (0, 1) [b, n, v] from a hash of (seed, counter, vocab id):
// a counter-based generator, so draws do not depend on the batch a row runs in.
func uniform(seed, counters *Node, vocab int) *Node {
	g := counters.Graph()
	ids := Iota(g, shapes.Make(dtypes.Uint32, 1, 1, vocab), 2)
	x := Add(MulScalar(InsertAxes(counters, -1), 0x9E3779B1), MulScalar(ids, 0x85EBCA77))
	x = mix32(BitwiseXor(x, seed))
	x = mix32(Add(x, MulScalar(ids, 0xC2B2AE3D)))
	// 24 random bits, centred in their interval so the value is never 0 or 1.
	bits := ConvertDType(BitwiseShiftRightLogicalScalar(x, 8), dtypes.Float32)
	return MulScalar(AddScalar(bits, 0.5), 1.0/(1<<24))
}

// mix32 is a 32-bit integer finaliser with good avalanche ("lowbias32").
func mix32(x *Node) *Node {
	x = BitwiseXor(x, BitwiseShiftRightLogicalScalar(x, 16))
	x = MulScalar(x, 0x7FEB352D)
	x = BitwiseXor(x, BitwiseShiftRightLogicalScalar(x, 15))
	x = MulScalar(x, 0x846CA68B)
	return BitwiseXor(x, BitwiseShiftRightLogicalScalar(x, 16))
}
