package quant

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/schollz/progressbar/v3"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// DefaultCalibrationBlockSize is the attention block size calibration runs with by
// default: that of the diffusion decoder's blocks.
const DefaultCalibrationBlockSize = 4

// CalibrateOptions configure [Calibrate].
type CalibrateOptions struct {
	// BlockSize of the block-causal attention of the forward passes (default
	// [DefaultCalibrationBlockSize]; 1 is causal attention).
	BlockSize int
	// Progress, when set, receives a progress bar (one step per sequence), e.g. os.Stderr.
	Progress io.Writer
}

// Calibrate runs the model over each token sequence, one forward pass per sequence from
// position 0 without a KV cache, with block-causal attention, and records for every
// linear layer the largest |x| over its inputs (in float32), the running maximum across
// sequences. It calibrates whatever model it is given; calibrating the unquantized
// model is the usual choice.
//
// Sequences must be non-empty, no longer than max_position_embeddings, and hold ids in
// the vocabulary. One program is compiled per distinct sequence length, so sequences of
// a few lengths calibrate fastest.
func Calibrate(m *model.Model, sequences [][]int, opts CalibrateOptions) (*Calibration, error) {
	block := opts.BlockSize
	if block == 0 {
		block = DefaultCalibrationBlockSize
	}
	if block < 1 {
		return nil, fmt.Errorf("quant: calibration block size must be at least 1, got %d", block)
	}
	if len(sequences) == 0 {
		return nil, errors.New("quant: calibration needs at least one token sequence")
	}
	cfg := m.Config
	for i, seq := range sequences {
		if err := checkSequence(seq, cfg); err != nil {
			return nil, fmt.Errorf("quant: calibration sequence %d: %w", i, err)
		}
	}
	cal := &Calibration{Format: CalibrationFormat, DType: CalibrationDType, BlockSize: block, Layers: map[string]LayerStats{}}
	programs := map[int]*amaxProgram{}
	defer func() {
		for _, p := range programs {
			p.program.Graph().Finalize()
		}
	}()
	var bar *progressbar.ProgressBar
	if opts.Progress != nil {
		bar = progressbar.NewOptions(len(sequences), progressbar.OptionSetWriter(opts.Progress),
			progressbar.OptionSetDescription("calibrating"), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("seq"), progressbar.OptionOnCompletion(func() { _, _ = fmt.Fprintln(opts.Progress) }))
	}
	for i, seq := range sequences {
		p, ok := programs[len(seq)]
		if !ok {
			var err error
			if p, err = compileAmax(modelcore.Of(m), len(seq), block); err != nil {
				return nil, err
			}
			programs[len(seq)] = p
		}
		amax, err := p.run(seq)
		if err != nil {
			return nil, fmt.Errorf("quant: calibration sequence %d: %w", i, err)
		}
		for j, name := range p.names {
			if !(amax[j] <= math.MaxFloat32) {
				return nil, fmt.Errorf("quant: calibration sequence %d: layer %s saw a non-finite input (amax %g)", i, name, amax[j])
			}
			stats := cal.Layers[name]
			stats.InputAmax = max(stats.InputAmax, float64(amax[j]))
			cal.Layers[name] = stats
		}
		cal.Sequences++
		cal.Tokens += len(seq)
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	return cal, nil
}

// checkSequence rejects an empty, too long or out-of-vocabulary sequence.
func checkSequence(seq []int, cfg model.Config) error {
	if len(seq) == 0 {
		return errors.New("no tokens")
	}
	if len(seq) > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("%d tokens exceed max_position_embeddings %d", len(seq), cfg.MaxPositionEmbeddings)
	}
	for j, t := range seq {
		if t < 0 || t >= cfg.VocabSize {
			return fmt.Errorf("token %d at index %d is outside the vocabulary of %d", t, j, cfg.VocabSize)
		}
	}
	return nil
}

// amaxProgram computes every linear layer's input amax for sequences of one length.
type amaxProgram struct {
	program *modelcore.Program
	names   []string // Layer names, in the order of the program's outputs.
}

// compileAmax compiles the forward pass of one sequence of the given length, whose
// outputs are max |x| (float32 scalars) of each linear layer's input x.
func compileAmax(m *modelcore.Model, length, block int) (*amaxProgram, error) {
	p := &amaxProgram{}
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, length)}
	var err error
	p.program, err = m.Compile(fmt.Sprintf("quant_calibrate_%d_%d", length, block), inputs,
		func(w *modelcore.Weights, in []*graph.Node) []*graph.Node {
			var outputs []*graph.Node
			observe := func(name string, x *graph.Node) {
				p.names = append(p.names, name)
				outputs = append(outputs, graph.ReduceAllMax(graph.Abs(graph.ConvertDType(x, dtypes.Float32))))
			}
			start := graph.Const(in[0].Graph(), []int32{0})
			m.Forward(w, modelcore.Window{Tokens: in[0], Start: start, BlockSize: block}, nil, observe)
			return outputs
		})
	if err != nil {
		return nil, fmt.Errorf("quant: compiling the calibration pass: %w", err)
	}
	return p, nil
}

// run returns the input amax of each layer for one sequence.
func (p *amaxProgram) run(seq []int) ([]float32, error) {
	ids := make([]int32, len(seq))
	for i, t := range seq {
		ids[i] = int32(t)
	}
	outputs, err := p.program.Run(tensors.FromFlatDataAndDimensions(ids, 1, len(ids)))
	if err != nil {
		return nil, err
	}
	amax := make([]float32, len(outputs))
	var errs []error
	for i, t := range outputs {
		values, err := tensors.CopyFlatData[float32](t)
		if err == nil {
			amax[i] = values[0]
		}
		errs = append(errs, err, t.FinalizeAll())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading amax: %w", err)
	}
	return amax, nil
}
