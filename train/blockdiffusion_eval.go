package train

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// BlockDiffusionEval is a converted model's teacher-forced cross-entropy on held-out text,
// in nats per token.
type BlockDiffusionEval struct {
	BlockSize int
	// Masked[k-1] is the mean cross-entropy of masked tokens in blocks with exactly k of
	// their BlockSize−1 maskable positions masked (k = BlockSize−1: a block's first
	// denoise step), the masked positions drawn at random with a fixed seed.
	Masked []float64
	// Anchor is the commit's next-anchor cross-entropy (from a clean block's last
	// position); Guess the fused mode's guess of it from a block with one mask left.
	Anchor, Guess float64
	// Targets counts the masked targets scored for each k.
	Targets []int64
}

// BlockDiffusionEvalOptions configure [EvaluateBlockDiffusion].
type BlockDiffusionEvalOptions struct {
	// BlockSize of the blocks (4 or 8); Batch rows of SeqLen tokens (SeqLen a multiple
	// of BlockSize) per execution; at most MaxBatches executions per k (0: all the data).
	BlockSize, Batch, SeqLen, MaxBatches int
	// BOS starts every document; MaskID is the mask token's id.
	BOS, MaskID int
	// DType is the compute dtype; the zero value is the model's.
	DType dtypes.DType
	// Seed draws the masked positions.
	Seed uint64
}

// EvaluateBlockDiffusion measures a converted model's masked cross-entropy by the number
// of masked positions per block, over data, with its own weights.
func EvaluateBlockDiffusion(ctx context.Context, m *model.Model, data *Tokens, opts BlockDiffusionEvalOptions) (BlockDiffusionEval, error) {
	B := opts.BlockSize
	if err := (Curriculum{Block: B}).Validate(opts.SeqLen); err != nil {
		return BlockDiffusionEval{}, err
	}
	if opts.Batch < 1 {
		return BlockDiffusionEval{}, fmt.Errorf("train: evaluation batch %d must be positive", opts.Batch)
	}
	if data.Vocab > m.Config.VocabSize {
		return BlockDiffusionEval{}, fmt.Errorf("train: the data's vocabulary of %d exceeds the model's %d", data.Vocab, m.Config.VocabSize)
	}
	dtype := opts.DType
	if dtype == dtypes.InvalidDType {
		dtype = m.DType
	}
	o := BlockDiffusion{MaskID: opts.MaskID}
	b, l := opts.Batch, opts.SeqLen
	row := shapes.Make(dtypes.Int32, b, l)
	draws := shapes.Make(dtypes.Float32, b, l)
	prog, err := modelcore.Of(m).Compile(fmt.Sprintf("blockdiffusion_eval/%d/%d/%d", b, l, B), []shapes.Shape{row, row, draws, draws},
		func(w *modelcore.Weights, in []*Node) []*Node {
			t := o.Loss(modelcore.Of(m), w, nil, in[0], in[1], Const(in[0].Graph(), int32(B)), in[2], in[3], dtype)
			return []*Node{t.MaskedNats, t.MaskedTargets, t.AnchorNats, t.AnchorTargets, t.GuessNats, t.GuessTargets}
		})
	if err != nil {
		return BlockDiffusionEval{}, err
	}
	defer prog.Graph().Finalize()

	res := BlockDiffusionEval{BlockSize: B, Masked: make([]float64, B-1), Targets: make([]int64, B-1)}
	var anchorNats, anchorN, guessNats, guessN float64
	half := make([]float32, b*l) // rates of 0.5: u = 0 masks a maskable position, u = 0.99 keeps it
	for i := range half {
		half[i] = 0.5
	}
	for k := 1; k < B; k++ {
		rng := rand.New(rand.NewPCG(opts.Seed, uint64(k)))
		var nats float64
		var targets int64
		batches := 0
		for rows := range evalRows(data, l, b, int32(opts.BOS)) {
			if err := ctx.Err(); err != nil {
				return BlockDiffusionEval{}, err
			}
			if opts.MaxBatches > 0 && batches == opts.MaxBatches {
				break
			}
			batches++
			tokens, segments := firstColumns(rows.Tokens, b, l+1, l), firstColumns(rows.Segments, b, l+1, l)
			u := make([]float32, b*l)
			for blk := 0; blk < b*l; blk += B {
				for j := 1; j < B; j++ {
					u[blk+j] = 0.99
				}
				for _, j := range rng.Perm(B - 1)[:k] {
					u[blk+1+j] = 0
				}
			}
			out, err := prog.Run(tensors.FromFlatDataAndDimensions(tokens, b, l), tensors.FromFlatDataAndDimensions(segments, b, l),
				tensors.FromFlatDataAndDimensions(half, b, l), tensors.FromFlatDataAndDimensions(u, b, l))
			if err != nil {
				return BlockDiffusionEval{}, err
			}
			vals := make([][]float32, len(out))
			for i, t := range out {
				if vals[i], err = tensors.CopyFlatData[float32](t); err != nil {
					return BlockDiffusionEval{}, fmt.Errorf("train: reading the evaluation: %w", err)
				}
				_ = t.FinalizeAll()
			}
			nats += float64(vals[0][0])
			targets += int64(vals[1][0])
			if k == B-1 {
				anchorNats, anchorN = anchorNats+float64(vals[2][0]), anchorN+float64(vals[3][0])
			}
			if k == 1 {
				guessNats, guessN = guessNats+float64(vals[4][0]), guessN+float64(vals[5][0])
			}
		}
		res.Targets[k-1] = targets
		if targets > 0 {
			res.Masked[k-1] = nats / float64(targets)
		}
	}
	if anchorN > 0 {
		res.Anchor = anchorNats / anchorN
	}
	if guessN > 0 {
		res.Guess = guessNats / guessN
	}
	return res, nil
}

// firstColumns returns the first n columns of a [rows, width] row-major slice.
func firstColumns(x []int32, rows, width, n int) []int32 {
	out := make([]int32, 0, rows*n)
	for r := range rows {
		out = append(out, x[r*width:r*width+n]...)
	}
	return out
}
