package train

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads best unqualified, as in GoMLX.

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// BlockDiffusion is the objective that converts an autoregressive model into a block-diffusion
// one that our decoder runs (docs/decoding.md). Each clean window x0 of L tokens is cut into
// blocks of BlockSize; in each block the anchor (offset 0) stays clean and every other
// position is masked with probability t, t uniform per block. The model reads the noisy copy
// beside the clean one, [x_t ‖ x_0] at positions [0..L) twice: a noisy block sees itself and
// the clean blocks before it, the clean copy is block-causal, so every noisy block is scored
// exactly as a denoise step over a cache of the clean blocks before it, and every clean
// block's last position exactly as a commit. Each window also goes in with the complementary
// mask, so that every maskable position is scored once per pair.
//
// The loss sums four means, each over the positions it scores:
//   - masked: cross-entropy of each masked token, read from the logits one position earlier
//     (token shift: the decoder reads position p's distribution at p−1);
//   - anchor (weight AnchorWeight): the next block's anchor from the clean block's last
//     position, what a commit predicts;
//   - guess (weight GuessWeight): the next block's anchor from the noisy block's last
//     position, the fused mode's guess, which saves a forward when right;
//   - kl (weight KLWeight): KL(base ‖ model) of the anchor's distribution against the frozen
//     autoregressive base at the same positions, so that the model keeps its AR quality;
//     with KLAtFirstMasks, also at every noisy row that reads the first of a block's masked
//     tail, where the right answer is the base's own next-token distribution.
type BlockDiffusion struct {
	// MaskID is the mask token's id (the checkpoint's mask_token_id).
	MaskID int
	// MinRate is the smallest masking rate t drawn (t is uniform in [MinRate, 1]); default 1e-3.
	MinRate float64
	// AnchorWeight, GuessWeight and KLWeight weigh the terms beside the masked one.
	AnchorWeight, GuessWeight, KLWeight float64
	// KLAtFirstMasks extends the KL term to the noisy rows q whose position q is clean and
	// whose positions q+1 to the block's end are all masked: there the model sees the clean
	// prefix and masks only, so its prediction of q+1 should be the base's (default false).
	KLAtFirstMasks bool
}

// DefaultBlockDiffusion returns the objective's defaults for a mask token id: anchors and KL
// at full weight, the fused guess at half. The block size is an input of the step (see
// [BlockDiffusion.Loss]), so that a curriculum changes it without recompiling.
func DefaultBlockDiffusion(maskID int) BlockDiffusion {
	return BlockDiffusion{MaskID: maskID, MinRate: 1e-3, AnchorWeight: 1, GuessWeight: 0.5, KLWeight: 1}
}

// BlockDiffusionTerms are the objective's terms as scalar float32 nodes.
type BlockDiffusionTerms struct {
	// Loss is the total that training minimises.
	Loss *Node
	// Masked, Anchor, Guess and KL are the mean cross-entropies (nats per token) and the
	// mean KL of the terms.
	Masked, Anchor, Guess, KL *Node
	// MaskedFraction is the fraction of maskable positions that were masked.
	MaskedFraction *Node
	// Sums [2] of the masked term's nats and scored targets, for the primary mask's copy
	// and the complement's; of the anchor's and the guess's likewise (both copies).
	MaskedNats, MaskedTargets                          *Node
	AnchorNats, AnchorTargets, GuessNats, GuessTargets *Node
}

// noisedWindows is the doubled input of one conversion step and what its logits are scored on.
type noisedWindows struct {
	win modelcore.TrainingWindow // tokens [2b, 2L]: x_t ‖ x_0, for the mask and its complement
	// targets [2b, r] int32 are the tokens after the scored rows win.LogitIndices selects:
	// the noisy copy's positions 0..L-1, then the clean copy's positions 4k+3.
	targets *Node
	// masked, anchor and guess [2b, r] float32 (0 or 1) select the rows each term scores.
	masked, anchor, guess *Node
	// maskable and hit [b, L] bool: positions that may be masked, and those the primary mask masks.
	maskable, hit *Node
	// anchorRows [b, L/4] int32 are the clean positions 4k+3, where the base is read.
	anchorRows *Node
	// firstMasks [2b, L] float32 (0 or 1) selects the noisy rows q that read the first of
	// their block's masked tail: q clean, q+1 to the block's end masked (KLAtFirstMasks).
	firstMasks *Node
}

// cleanRowsPer is the spacing of the clean copy's scored positions: every 4th, so that the
// block ends of block sizes 2, 4 and 8 are among them.
const cleanRowsPer = 4

// buildNoised builds the doubled windows from clean tokens x0 [b, L] int32 and their
// documents segments [b, L] int32 (nil: one document; attention and targets stay within a
// document, and a negative segment marks a pad, which is never scored), the block size (an
// int32 scalar node: 4 or 8, see cleanRowsPer), rates [b, L] uniform in [0, 1) (block j's
// masking rate comes from rates[:, j]) and draws u [b, L] uniform in [0, 1). Blocks are
// aligned to the window: rotary positions are relative, and windows start anywhere in a
// document, so a block's phase against its document's start carries no information.
func (o BlockDiffusion) buildNoised(x0, segments, blockSize, rates, u *Node) noisedWindows {
	g := x0.Graph()
	b, l := x0.Shape().Dimensions[0], x0.Shape().Dimensions[1]
	i32 := func(v int) *Node { return Const(g, int32(v)) }
	pos := Iota(g, shapes.Make(dtypes.Int32, l), 0) // [L]
	if segments == nil {
		segments = Zeros(g, shapes.Make(dtypes.Int32, b, l))
	}
	x0 = MaxScalar(x0, 0) // pads read any row; nothing but pads sees them

	// The masks: offsets 1.. of each block, each masked with its block's rate t.
	t := Gather(rates, stackIndices(g, b, l, Div(pos, blockSize))) // [b, L]
	t = AddScalar(MulScalar(t, 1-o.MinRate), o.MinRate)
	maskable := LogicalAnd(BroadcastToDims(InsertAxes(NotEqual(Rem(pos, blockSize), i32(0)), 0), b, l),
		GreaterOrEqual(segments, i32(0)))
	hit := LessThan(u, t)
	masks := Concatenate([]*Node{LogicalAnd(maskable, hit), LogicalAnd(maskable, LogicalNot(hit))}, 0) // [2b, L]
	clean := Concatenate([]*Node{x0, x0}, 0)                                                           // [2b, L]
	noisy := Where(masks, BroadcastToDims(i32(o.MaskID), 2*b, l), clean)
	tokens := Concatenate([]*Node{noisy, clean}, 1) // [2b, 2L]
	positions := BroadcastToDims(InsertAxes(Concatenate([]*Node{pos, pos}, 0), 0), 2*b, 2*l)

	// Visibility [2L, 2L]: a noisy query sees its own noisy block and the clean blocks
	// before it; a clean query sees the clean blocks up to its own.
	both := Iota(g, shapes.Make(dtypes.Int32, 2*l), 0)
	isClean := GreaterOrEqual(both, i32(l))
	blockOf := Div(Rem(both, i32(l)), blockSize)
	qClean, kClean := InsertAxes(isClean, 1), InsertAxes(isClean, 0)
	qNoisy, kNoisy := LogicalNot(qClean), LogicalNot(kClean)
	qBlock, kBlock := InsertAxes(blockOf, 1), InsertAxes(blockOf, 0)
	visible := LogicalOr(
		LogicalOr(
			LogicalAnd(LogicalAnd(qNoisy, kNoisy), Equal(qBlock, kBlock)),
			LogicalAnd(LogicalAnd(qNoisy, kClean), GreaterThan(qBlock, kBlock))),
		LogicalAnd(LogicalAnd(qClean, kClean), GreaterOrEqual(qBlock, kBlock))) // [2L, 2L]
	seg2 := Concatenate([]*Node{segments, segments}, 1)        // [b, 2L]
	sameDoc := Equal(InsertAxes(seg2, 2), InsertAxes(seg2, 1)) // [b, 2L, 2L]
	visible = LogicalAnd(Concatenate([]*Node{sameDoc, sameDoc}, 0), InsertAxes(visible, 0))
	// A pad alone in its block sees nothing: let it see itself (nothing else sees it).
	visible = LogicalOr(visible, InsertAxes(Equal(Iota(g, shapes.Make(dtypes.Int32, 2*l, 2*l), 0), Iota(g, shapes.Make(dtypes.Int32, 2*l, 2*l), 1)), 0))

	// Scored rows: the noisy positions 0..L-1, then the clean positions 4k+3.
	nc := l / cleanRowsPer
	cleanPos := AddScalar(MulScalar(Iota(g, shapes.Make(dtypes.Int32, nc), 0), cleanRowsPer), cleanRowsPer-1)
	rows := Concatenate([]*Node{pos, AddScalar(cleanPos, float64(l))}, 0) // [r]
	r := l + nc
	// Each row's target is the token after it (the shift); past the window it scores nothing.
	next := Concatenate([]*Node{AddScalar(pos, 1), AddScalar(cleanPos, 1)}, 0) // [r]
	inWindow := LessThan(next, i32(l))
	next = Min(next, i32(l-1))
	isNoisy := LessThan(Iota(g, shapes.Make(dtypes.Int32, r), 0), i32(l))
	nextIsAnchor := LogicalAnd(inWindow, Equal(Rem(next, blockSize), i32(0)))
	rowsOf := func(x *Node) *Node { return BroadcastToDims(InsertAxes(x, 0), 2*b, r) }
	f32 := func(x *Node) *Node { return ConvertDType(x, dtypes.Float32) }
	nextMasked := Gather(masks, stackIndices(g, 2*b, r, next)) // [2b, r]
	// A target counts within its row's document, and never on a pad.
	rowPos := Rem(rows, i32(l))
	segs := Concatenate([]*Node{segments, segments}, 0) // [2b, L]
	rowSeg := Gather(segs, stackIndices(g, 2*b, r, rowPos))
	nextSeg := Gather(segs, stackIndices(g, 2*b, r, next))
	valid := LogicalAnd(Equal(rowSeg, nextSeg), GreaterOrEqual(nextSeg, i32(0)))

	// tailMasked[p]: p and every later position of p's block are masked. Blocks hold at
	// most 8 positions (Curriculum.Validate), so 8 shifted looks cover any block.
	blockEnd := Mul(AddScalar(Div(pos, blockSize), 1), blockSize) // [L]
	tailMasked := masks
	for d := 1; d < 8; d++ {
		shifted := Concatenate([]*Node{SliceAxis(masks, 1, AxisRange(d, l)), BroadcastToDims(Const(g, true), 2*b, d)}, 1)
		pastBlock := BroadcastToDims(InsertAxes(GreaterOrEqual(AddScalar(pos, float64(d)), blockEnd), 0), 2*b, l)
		tailMasked = LogicalAnd(tailMasked, LogicalOr(pastBlock, shifted))
	}
	noisyNext := SliceAxis(next, 0, AxisRange(0, l)) // p = q+1, clamped to the window
	firstMasks := LogicalAnd(LogicalAnd(LogicalNot(masks), Gather(tailMasked, stackIndices(g, 2*b, l, noisyNext))),
		SliceAxis(LogicalAnd(valid, rowsOf(LogicalAnd(inWindow, LogicalNot(nextIsAnchor)))), 1, AxisRange(0, l)))
	return noisedWindows{
		win:        modelcore.TrainingWindow{Tokens: tokens, Positions: positions, Visible: visible, LogitIndices: rowsOf(rows)},
		targets:    Gather(clean, stackIndices(g, 2*b, r, next)),
		masked:     f32(LogicalAnd(valid, LogicalAnd(nextMasked, rowsOf(LogicalAnd(isNoisy, inWindow))))),
		anchor:     f32(LogicalAnd(valid, rowsOf(LogicalAnd(nextIsAnchor, LogicalNot(isNoisy))))),
		guess:      f32(LogicalAnd(valid, rowsOf(LogicalAnd(nextIsAnchor, isNoisy)))),
		maskable:   maskable,
		hit:        hit,
		anchorRows: BroadcastToDims(InsertAxes(cleanPos, 0), b, nc),
		firstMasks: f32(firstMasks),
	}
}

// Loss builds the objective's terms for clean windows x0 [b, L] int32 of documents
// segments [b, L] (see buildNoised; L a multiple of 4 and of the block size) under the model's weights w, bound to trainable nodes, and the
// frozen base's weights base (nil when KLWeight is 0). blockSize is an int32 scalar node;
// rates and u are [b, L] float32 uniform draws in [0, 1) (see buildNoised). dtype is the
// compute dtype.
func (o BlockDiffusion) Loss(m *modelcore.Model, w, base *modelcore.Weights, x0, segments, blockSize, rates, u *Node, dtype dtypes.DType) BlockDiffusionTerms {
	g := x0.Graph()
	b, l := x0.Shape().Dimensions[0], x0.Shape().Dimensions[1]
	nw := o.buildNoised(x0, segments, blockSize, rates, u)
	win := nw.win
	win.DType = dtype
	logp := LogSoftmax(m.ForwardTraining(w, win))   // [2b, r, v]
	ce := Neg(Gather(logp, gatherLast(nw.targets))) // [2b, r]
	one := Const(g, float32(1))
	mean := func(sel *Node) *Node { return Div(ReduceAllSum(Mul(ce, sel)), Max(ReduceAllSum(sel), one)) }
	perCopy := func(x *Node) *Node { return ReduceSum(Reshape(x, 2, -1), 1) } // [2]: primary, complement
	terms := BlockDiffusionTerms{Masked: mean(nw.masked), Anchor: mean(nw.anchor), Guess: mean(nw.guess),
		MaskedNats: perCopy(Mul(ce, nw.masked)), MaskedTargets: perCopy(nw.masked),
		AnchorNats: ReduceAllSum(Mul(ce, nw.anchor)), AnchorTargets: ReduceAllSum(nw.anchor),
		GuessNats: ReduceAllSum(Mul(ce, nw.guess)), GuessTargets: ReduceAllSum(nw.guess)}
	terms.KL = Const(g, float32(0))
	if o.KLWeight != 0 {
		if segments == nil {
			segments = Zeros(g, shapes.Make(dtypes.Int32, b, l))
		}
		sameDoc := Equal(InsertAxes(segments, 2), InsertAxes(segments, 1))
		self := Equal(Iota(g, shapes.Make(dtypes.Int32, l, l), 0), Iota(g, shapes.Make(dtypes.Int32, l, l), 1))
		baseRows := nw.anchorRows
		if o.KLAtFirstMasks {
			baseRows = BroadcastToDims(InsertAxes(Iota(g, shapes.Make(dtypes.Int32, l), 0), 0), b, l)
		}
		baseWin := modelcore.TrainingWindow{
			Tokens:       MaxScalar(x0, 0),
			Positions:    BroadcastToDims(InsertAxes(Iota(g, shapes.Make(dtypes.Int32, l), 0), 0), b, l),
			Visible:      LogicalOr(LogicalAnd(sameDoc, InsertAxes(modelcore.CausalVisibility(g, l), 0)), InsertAxes(self, 0)),
			LogitIndices: baseRows,
			DType:        dtype,
		}
		pBase := StopGradient(Softmax(m.ForwardTraining(base, baseWin))) // [b, rows, v]
		pBase = Concatenate([]*Node{pBase, pBase}, 0)                    // both masks' rows
		// klOf is KL(base ‖ ours) per row.
		klOf := func(pBase, ours *Node) *Node {
			logBase := Log(Max(pBase, Const(g, float32(1e-30))))
			return ReduceSum(Mul(pBase, Sub(logBase, ours)), -1)
		}
		nc := l / cleanRowsPer
		anchorBase := pBase
		if o.KLAtFirstMasks { // the base at every position; the anchors' rows are 4k+3
			v := pBase.Shape().Dimensions[2]
			anchorBase = Reshape(SliceAxis(Reshape(pBase, 2*b, nc, cleanRowsPer, v), 2, AxisElem(cleanRowsPer-1)), 2*b, nc, v)
		}
		sel := SliceAxis(nw.anchor, 1, AxisRange(l, l+nc))
		sum := ReduceAllSum(Mul(klOf(anchorBase, SliceAxis(logp, 1, AxisRange(l, l+nc))), sel)) // the clean rows
		count := ReduceAllSum(sel)
		if o.KLAtFirstMasks {
			sum = Add(sum, ReduceAllSum(Mul(klOf(pBase, SliceAxis(logp, 1, AxisRange(0, l))), nw.firstMasks)))
			count = Add(count, ReduceAllSum(nw.firstMasks))
		}
		terms.KL = Div(sum, Max(count, Const(g, float32(1))))
	}
	terms.Loss = Add(Add(terms.Masked, MulScalar(terms.Anchor, o.AnchorWeight)),
		Add(MulScalar(terms.Guess, o.GuessWeight), MulScalar(terms.KL, o.KLWeight)))
	maskable := ConvertDType(nw.maskable, dtypes.Float32)
	terms.MaskedFraction = Div(ReduceAllSum(Mul(maskable, ConvertDType(nw.hit, dtypes.Float32))),
		Max(ReduceAllSum(maskable), Const(g, float32(1))))
	return terms
}

// gatherLast returns indices [n, r, 3] that pick x[i, j, idx[i, j]] from x [n, r, v] for
// idx [n, r] int32.
func gatherLast(idx *Node) *Node {
	g := idx.Graph()
	n, r := idx.Shape().Dimensions[0], idx.Shape().Dimensions[1]
	shape := shapes.Make(dtypes.Int32, n, r)
	return Stack([]*Node{Iota(g, shape, 0), Iota(g, shape, 1), idx}, -1)
}

// stackIndices returns gather indices [rows, n, 2] of (row, idx[j]) for idx [n] int32.
func stackIndices(g *Graph, rows, n int, idx *Node) *Node {
	shape := shapes.Make(dtypes.Int32, rows, n)
	return Stack([]*Node{Iota(g, shape, 0), BroadcastToDims(InsertAxes(idx, 0), rows, n)}, -1)
}

// Curriculum sets the block size by step: LargeBlock until step LargeUntil, then Block.
type Curriculum struct {
	LargeBlock, LargeUntil, Block int
}

// blockSize is the curriculum's block size at step (an int32 scalar node).
func (c Curriculum) blockSize(step *Node) *Node {
	g := step.Graph()
	if c.LargeUntil <= 0 || c.LargeBlock == 0 {
		return Const(g, int32(c.Block))
	}
	return Where(LessThan(step, Const(g, int32(c.LargeUntil))), Const(g, int32(c.LargeBlock)), Const(g, int32(c.Block)))
}

// Validate checks that the block sizes are ones the objective scores (4 or 8) and that
// they divide the window of seqLen tokens.
func (c Curriculum) Validate(seqLen int) error {
	for _, b := range []int{c.Block, c.LargeBlock} {
		if b == 0 && c.LargeUntil <= 0 {
			continue
		}
		if b != 4 && b != 8 {
			return fmt.Errorf("train: block size %d: the conversion trains blocks of 4 or 8", b)
		}
		if seqLen%b != 0 {
			return fmt.Errorf("train: block size %d does not divide the sequence length %d", b, seqLen)
		}
	}
	return nil
}

// Objective is the conversion's [Objective] over the trainer's rows: each row's first
// SeqLen tokens are the clean window, blocks of the curriculum's size at the step. It
// reads Inputs.Base (the trainer's FrozenBase) when KLWeight is not 0. The loss's Nats and
// Targets are the masked term's, so that evaluation reports the masked cross-entropy.
func (o BlockDiffusion) Objective(c Curriculum) Objective {
	return func(in *Inputs) Loss {
		s := in.Tokens.Shape().Dimensions[1] - 1
		b := in.Tokens.Shape().Dimensions[0]
		first := func(x *Node) *Node { return SliceAxis(x, 1, AxisRange(0, s)) }
		rates, u := in.Uniform(b, s), in.Uniform(b, s)
		base := in.Base
		if o.KLWeight == 0 {
			base = nil
		} else if base == nil {
			panic(fmt.Errorf("train: the block-diffusion objective's KL term needs the trainer's FrozenBase"))
		}
		t := o.Loss(in.Model, in.Weights, base, first(in.Tokens), first(in.Segments), c.blockSize(in.Step), rates, u, in.DType)
		return Loss{Value: t.Loss, Nats: ReduceAllSum(t.MaskedNats), Targets: ReduceAllSum(t.MaskedTargets)}
	}
}
