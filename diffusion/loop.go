package diffusion

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// loop builds the decoding graphs of one shape of decoding: the prompt's prefill and
// the chunk of iterations that runs inside a While. What changes shapes or the graph's
// structure is fixed here; thresholds, limits and stop tokens are inputs ([params]), so
// one compiled program serves every configuration of a mode and block size.
type loop struct {
	m          *modelcore.Model
	mode       Mode
	block      int  // B
	window     int  // positions per forward: B, or 2B in fused mode, before windowFor pads it
	mask       int  // MASK token id
	sampling   bool // candidates are sampled rather than greedy
	topK, topP bool // sampling filters in use
}

// windowFor is the positions per forward at batch rows: the mode's window, padded to
// backend.MinWindow. Padding positions past the block only compute discarded rows:
// block-causal attention hides later blocks, and only the block's own positions are
// written.
func (l *loop) windowFor(batch int) int {
	return max(l.window, backend.MinWindow(l.m.Backend(), batch))
}

// params are the inputs every program of a loop reads besides the state.
type params struct {
	promptLen   *Node // [b] int32 P
	maxNew      *Node // [] int32 N
	seed        *Node // [] uint32
	threshold   *Node // [] float32 τ
	minReveal   *Node // [] int32 k_min
	stops       *Node // [maxStops] int32 stop tokens, padded with -1
	schedule    *Node // [] int32 Schedule
	temperature *Node // [] float32
	topK        *Node // [] int32, 0 for all
	topP        *Node // [] float32, 1 for all
	chunkBlocks *Node // [] int32: the blocks a chunk finishes before the host reads
}

// nodes lists the parameters; paramsFrom is its inverse.
func (p params) nodes() []*Node {
	return []*Node{p.promptLen, p.maxNew, p.seed, p.threshold, p.minReveal, p.stops, p.schedule, p.temperature, p.topK, p.topP,
		p.chunkBlocks}
}

// numParams is the number of params' nodes.
const numParams = 11

func paramsFrom(n []*Node) params {
	return params{promptLen: n[0], maxNew: n[1], seed: n[2], threshold: n[3], minReveal: n[4],
		stops: n[5], schedule: n[6], temperature: n[7], topK: n[8], topP: n[9], chunkBlocks: n[10]}
}

// maxStops is the most stop tokens a decoder takes (EOS included).
const maxStops = 16

// denoise applies one denoise step to the current block: tokens [b, B], masked
// [b, B], candidates and confidences [b, B] for each position. It returns the new
// tokens and mask, and which positions were revealed.
func (l *loop) denoise(p params, tokens, masked, cand, conf *Node) (newTokens, newMasked, revealed *Node) {
	g := tokens.Graph()
	B := l.block
	// Reveal the masked positions whose confidence is strictly above the threshold (all
	// of them, or none, under a forced schedule).
	schedule := func(s Schedule) *Node { return Equal(p.schedule, Scalar(g, dtypes.Int32, int(s))) }
	aboveThreshold := Where(schedule(RevealAll), OnesLike(masked), GreaterThan(conf, p.threshold))
	aboveThreshold = LogicalAnd(aboveThreshold, LogicalNot(schedule(RevealMin)))
	revealed = LogicalAnd(masked, aboveThreshold)
	numMasked := ReduceSum(ConvertDType(masked, dtypes.Int32), -1)
	minReveal := Min(numMasked, p.minReveal) // [b]
	// Too few: take the minReveal most confident masked positions, ties to the lower
	// position. rank[i] counts the positions ranked before i.
	c := Where(masked, conf, Scalar(g, dtypes.Float32, -1))
	ci, cj := InsertAxes(c, -1), InsertAxes(c, 1) // [b, i, 1], [b, 1, j]
	idx := Iota(g, shapes.Make(dtypes.Int32, 1, B, B), 1)
	jdx := Iota(g, shapes.Make(dtypes.Int32, 1, B, B), 2)
	before := LogicalOr(GreaterThan(cj, ci), LogicalAnd(Equal(cj, ci), LessThan(jdx, idx)))
	rank := ReduceSum(ConvertDType(before, dtypes.Int32), -1) // [b, B]
	topRanked := LogicalAnd(masked, LessThan(rank, InsertAxes(minReveal, -1)))
	tooFew := LessThan(ReduceSum(ConvertDType(revealed, dtypes.Int32), -1), minReveal)
	revealed = sel(tooFew, topRanked, revealed)
	newTokens = Where(revealed, cand, tokens)
	newMasked = LogicalAnd(masked, LogicalNot(revealed))
	return newTokens, newMasked, revealed
}

// hitsStop reports rows whose current block, tokens [b, B] starting at blockStart,
// holds a stop token in the generated region with no masked position before it.
func (l *loop) hitsStop(p params, tokens, masked, blockStart *Node) *Node {
	g := tokens.Graph()
	// [b, B, 1] against [1, 1, maxStops]; padding (-1) matches no token.
	isStop := ReduceLogicalOr(Equal(InsertAxes(tokens, -1), Reshape(p.stops, 1, 1, maxStops)), -1)
	pos := Add(InsertAxes(blockStart, -1), rowIota(g, l.block))
	generated := GreaterOrEqual(pos, InsertAxes(p.promptLen, -1))
	// A masked position precedes i when the running count of masks before i is positive.
	masksBefore := Sub(CumSum(ConvertDType(masked, dtypes.Int32), -1), ConvertDType(masked, dtypes.Int32))
	hit := LogicalAnd(LogicalAnd(isStop, generated), LogicalAnd(LogicalNot(masked), Equal(masksBefore, ZerosLike(masksBefore))))
	return ReduceLogicalOr(hit, -1)
}

// finishBlocks ends or advances the rows whose current block is clean, after the
// transition of an iteration (or the prefill): a row whose generated length reached N
// is done; otherwise its block awaits its commit (pending). In fused mode the next
// block starts at once with the anchor guess, so the commit can share the next
// forward. guess [b] is the candidate for the position after the block.
func (l *loop) finishBlocks(s *state, p params, active, guess *Node) (*state, *Node) {
	B := l.block
	clean := LogicalAnd(active, LogicalAnd(LogicalNot(s.pending), LogicalNot(ReduceLogicalOr(s.masked, -1))))
	generated := Sub(AddScalar(s.blockStart, B), p.promptLen)
	lengthDone := LogicalAnd(clean, GreaterOrEqual(generated, p.maxNew))
	advance := LogicalAnd(clean, LogicalNot(lengthDone))
	n := *s
	n.done = LogicalOr(s.done, lengthDone)
	n.pending = LogicalOr(s.pending, advance)
	if l.mode == Fused {
		next := AddScalar(s.blockStart, B)
		n.blockStart = sel(advance, next, s.blockStart)
		tokens, masked := l.newBlock(InsertAxes(guess, -1))
		n.seq = writeAt(s.seq, next, tokens, BroadcastToDims(InsertAxes(advance, -1), tokens.Shape().Dimensions...))
		n.masked = sel(advance, masked, s.masked)
	}
	return &n, clean
}

// newBlock returns the tokens [b, B] and mask of blocks that start with anchor [b, 1]:
// [anchor, MASK, …], all but the first position masked.
func (l *loop) newBlock(anchor *Node) (tokens, masked *Node) {
	g := anchor.Graph()
	b, B := anchor.Shape().Dimensions[0], l.block
	tokens = Concatenate([]*Node{anchor, BroadcastToDims(Scalar(g, dtypes.Int32, l.mask), b, B-1)}, -1)
	i := rowIota(g, B)
	masked = BroadcastToDims(GreaterThan(i, ZerosLike(i)), b, B)
	return tokens, masked
}

// iterate runs one forward for every row and applies the transition of its mode. It
// returns the new state, the tokens each row's denoise step revealed [b, B] (-1
// elsewhere), and the rows whose block became clean.
func (l *loop) iterate(w *modelcore.Weights, s *state, p params) (next *state, record, clean *Node) {
	g := s.seq.Graph()
	B, W := l.block, l.windowFor(s.seq.Shape().Dimensions[0])
	fused := l.mode == Fused
	active := LogicalNot(s.done)
	pendingB := MulScalar(ConvertDType(s.pending, dtypes.Int32), B)

	// The window: the current block, preceded in fused mode by the block awaiting its
	// commit. Both modes write the first B positions when a commit is pending.
	start := s.blockStart
	if fused {
		start = Sub(s.blockStart, pendingB)
	}
	// Candidates for positions blockStart+j, j = 0..B, come from the logits at the
	// position before each: window index blockStart-1+j-start.
	logitIdx := Add(InsertAxes(Sub(SubScalar(s.blockStart, 1), start), -1), rowIota(g, B+1))
	logitIdx = MinScalar(MaxScalar(logitIdx, 0), W-1)
	counters := Add(MulScalar(ConvertDType(InsertAxes(s.forwards, -1), dtypes.Uint32), B+1),
		ConvertDType(rowIota(g, B+1), dtypes.Uint32))
	win := modelcore.Window{
		Tokens:       readAt(s.seq, start, W),
		Start:        start,
		CacheLen:     start,
		WriteLen:     pendingB,
		BlockSize:    B,
		LogitIndices: logitIdx,
	}
	autoregressive := !fused && B == 1
	if autoregressive {
		// A one-token block is clean once placed, so every active row is pending here
		// and writes its token: a constant WriteLen says so, and lets XLA place the key
		// and value once, for the attention and the cache, rather than select the whole
		// cache again at the end of each iteration (done rows' caches are never read).
		// Only the last candidate, the next token, is used: the head and the pick run
		// on that position alone (both indices are 0 anyway).
		win.WriteLen = OnesLike(s.blockStart)
		win.LogitIndices = SliceAxis(logitIdx, -1, AxisElem(B))
		counters = SliceAxis(counters, -1, AxisElem(B))
	}
	logits, cache := l.m.Forward(w, win, s.cache, nil)
	cand, conf, bad := l.pick(p, logits, counters) // [b, B+1], or [b, 1] when autoregressive
	if autoregressive {
		b := cand.Shape().Dimensions[0]
		cand, conf = BroadcastToDims(cand, b, B+1), BroadcastToDims(conf, b, B+1)
	}

	n := *s
	n.cache = cache
	n.forwards = count(s.forwards, active)
	commit := LogicalAnd(active, s.pending)
	n.commits = count(s.commits, commit)
	n.pending = LogicalAnd(s.pending, LogicalNot(active)) // this forward commits
	blockCand := SliceAxis(cand, -1, AxisRange(0, B))
	blockConf := SliceAxis(conf, -1, AxisRange(0, B))
	tokens := readAt(s.seq, s.blockStart, B)
	masked := s.masked

	var step *Node // rows that take a denoise step
	if fused {
		// The commit's logits give the true anchor; a wrong guess remasks the block.
		anchor := SliceAxis(cand, -1, AxisElem(0)) // [b, 1]
		guess := SliceAxis(tokens, -1, AxisElem(0))
		// Forced schedules accept every guess (their tokens are not the model's anyway).
		natural := Equal(p.schedule, Scalar(g, dtypes.Int32, int(Natural)))
		remask := LogicalAnd(LogicalAnd(commit, natural), Squeeze(NotEqual(anchor, guess), -1))
		n.remasks = count(s.remasks, remask)
		step = LogicalAnd(active, LogicalNot(remask))
		restart, restartMask := l.newBlock(anchor)
		tokens = sel(remask, restart, tokens)
		masked = sel(remask, restartMask, masked)
	} else {
		// Reference: a pending row commits and starts the next block with its anchor.
		step = LogicalAnd(active, LogicalNot(s.pending))
		next := AddScalar(s.blockStart, B)
		n.blockStart = sel(commit, next, s.blockStart)
		started, startedMask := l.newBlock(SliceAxis(cand, -1, AxisElem(B)))
		tokens = sel(commit, started, tokens)
		masked = sel(commit, startedMask, masked)
	}
	stepped, steppedMask, revealed := l.denoise(p, tokens, masked, blockCand, blockConf)
	tokens = sel(step, stepped, tokens)
	n.masked = sel(step, steppedMask, masked)
	revealed = LogicalAnd(revealed, InsertAxes(step, -1))
	n.steps = count(s.steps, step)
	n.seq = writeAt(s.seq, n.blockStart, tokens, nil)

	// Stop tokens are checked after each denoise step, and, with one-token blocks,
	// after each anchor (autoregressive decoding has no steps).
	checkStop := step
	if B == 1 {
		checkStop = commit
	}
	stop := LogicalAnd(checkStop, l.hitsStop(p, tokens, n.masked, n.blockStart))
	// Rows whose logits were not finite end here, failed: their tokens mean nothing.
	n.failed = LogicalOr(s.failed, LogicalAnd(active, bad))
	n.done = LogicalOr(LogicalOr(s.done, stop), n.failed)
	n.stopped = LogicalOr(s.stopped, stop)

	next, clean = l.finishBlocks(&n, p, LogicalAnd(active, LogicalNot(LogicalOr(stop, n.failed))),
		Squeeze(SliceAxis(cand, -1, AxisElem(B)), -1))
	record = Where(revealed, tokens, Scalar(g, dtypes.Int32, -1))
	return next, record, clean
}
