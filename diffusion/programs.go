package diffusion

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// prefill builds the initial state: it writes the prompts' full blocks into a new
// cache and, for prompts that end on a block boundary, places the anchor read from the
// last prompt position. seq [b, s] holds the prompts followed by MASK; tokens [b, w]
// holds their full blocks (padded).
func (l *loop) prefill(w *modelcore.Weights, p params, seq, tokens *Node) *state {
	g := seq.Graph()
	B := l.block
	b, capacity := seq.Shape().Dimensions[0], seq.Shape().Dimensions[1]
	full := MulScalar(DivScalar(p.promptLen, B), B) // C: the prompt's full blocks
	cache := &modelcore.CacheNodes{}
	for range l.m.Config.NumLayers {
		cache.K = append(cache.K, Zeros(g, w.CacheShape(b, capacity)))
		cache.V = append(cache.V, Zeros(g, w.CacheShape(b, capacity)))
	}
	zeros := ZerosLike(p.promptLen)
	last := InsertAxes(MaxScalar(SubScalar(full, 1), 0), -1)
	logits, cache := l.m.Forward(w, modelcore.Window{
		Tokens: tokens, Start: zeros, WriteLen: full, BlockSize: B, LogitIndices: last,
	}, cache, nil)
	// The anchor draw uses counter B, which no iteration uses (they start at B+1).
	counter := BroadcastToDims(Scalar(g, dtypes.Uint32, B), b, 1)
	anchor, _, bad := l.pick(p, logits, counter) // [b, 1]
	onBoundary := Equal(full, p.promptLen)
	prefilled := GreaterThan(full, zeros)

	s := &state{
		seq:        writeAt(seq, p.promptLen, anchor, InsertAxes(onBoundary, -1)),
		blockStart: full,
		pending:    ConvertDType(zeros, dtypes.Bool),
		forwards:   ConvertDType(prefilled, dtypes.Int32),
		steps:      zeros, commits: zeros, remasks: zeros,
		cache: cache,
	}
	pos := Add(InsertAxes(full, -1), rowIota(g, B))
	s.masked = LogicalAnd(GreaterThan(rowIota(g, B), ZerosLike(rowIota(g, B))), GreaterOrEqual(pos, InsertAxes(p.promptLen, -1)))
	s.done, s.stopped = s.pending, s.pending
	s.failed = LogicalAnd(prefilled, bad)
	if B == 1 {
		// A one-token block is clean as soon as its anchor is placed.
		tokens := readAt(s.seq, s.blockStart, 1)
		stop := LogicalAnd(prefilled, l.hitsStop(p, tokens, s.masked, s.blockStart))
		s.done, s.stopped = stop, stop
		s, _ = l.finishBlocks(s, p, LogicalNot(LogicalOr(stop, s.failed)), Squeeze(anchor, -1))
	}
	s.done = LogicalOr(s.done, s.failed)
	return s
}

// chunk runs iterations until every row is done or has finished p.chunkBlocks blocks
// (at most BlocksPerReadback), or maxIters iterations ran: inside one While when
// inWhile, else exactly one iteration (maxIters must then be 1). It returns the new
// state, the tokens revealed per iteration [maxIters, b, B] (-1 elsewhere) with each
// iteration's block start [maxIters, b], and the number of iterations run.
//
// The Go backend compiles closures before its optimisation passes rewrite them (its
// implicit-broadcast fusion then leaves their nodes unscheduled), so there the host
// runs the iterations one program execution each; XLA runs them all in the While.
func (l *loop) chunk(w *modelcore.Weights, p params, s *state, maxIters int, inWhile bool) (out *state, revealed, starts, iters *Node) {
	g := s.seq.Graph()
	b := s.seq.Shape().Dimensions[0]
	// Loop state: the decoder state, then the iteration, the blocks finished per row,
	// and the trace. Its initial values use uncached constants (see modelcore.Weights.While).
	zeros := func(dims ...int) *Node { return ConstTensor(g, tensors.FromShape(shapes.Make(dtypes.Int32, dims...))) }
	init := append(s.nodes(), zeros(), zeros(b), zeros(maxIters, b, l.block), zeros(maxIters, b))
	n := len(init)
	split := func(in []*Node) (st *state, iter, blocks, rev, sts *Node) {
		return fromNodes(in[:n-4]), in[n-4], in[n-3], in[n-2], in[n-1]
	}
	body := func(w *modelcore.Weights, in []*Node, p params) []*Node {
		st, iter, blocks, rev, sts := split(in)
		next, record, clean := l.iterate(w, st, p)
		g := iter.Graph()
		zero := Const(g, int32(0))
		rev = DynamicUpdateSlice(rev, InsertAxes(record, 0), []*Node{iter, zero, zero})
		sts = DynamicUpdateSlice(sts, InsertAxes(st.blockStart, 0), []*Node{iter, zero})
		return append(next.nodes(), Add(iter, Const(g, int32(1))), count(blocks, clean), rev, sts)
	}
	var final []*Node
	if !inWhile {
		final = body(w, init, p)
	} else {
		cond := func(_ *modelcore.Weights, in, inv []*Node) []*Node {
			st, iter, blocks, _, _ := split(in)
			g := iter.Graph()
			waiting := LogicalAnd(LogicalNot(st.done), LessThan(blocks, paramsFrom(inv).chunkBlocks))
			return []*Node{LogicalAnd(LessThan(iter, Const(g, int32(maxIters))), anyTrue(waiting))}
		}
		final = w.While(init, p.nodes(), cond, func(w *modelcore.Weights, in, inv []*Node) []*Node {
			return body(w, in, paramsFrom(inv))
		})
	}
	st, iter, _, rev, sts := split(final)
	return st, rev, sts, iter
}

// anyTrue reports whether some element of the vector x is true. The body's reductions
// include ReduceLogicalOr, and go-xla v0.4.13 lets a kind of reduction appear in one
// function of a graph only, so the loop condition counts with a dot product.
func anyTrue(x *Node) *Node {
	f := ConvertDType(x, dtypes.Float32)
	return GreaterThan(Dot(f, f).Product(), Const(x.Graph(), float32(0)))
}
