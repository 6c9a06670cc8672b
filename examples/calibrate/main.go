// Command calibrate measures the static FP8 input scales of a model's linear layers and
// writes them as a calibration file (format: package quant's documentation).
//
// It runs the model over token sequences, random ones by default, with block-causal
// forward passes, records each linear layer's largest input magnitude, and prints a
// summary. With -save it also quantizes the model (FP8 E4M3 weights, static input
// scales) and writes it as a compressed-tensors checkpoint folder.
//
//	go run ./examples/calibrate -model DIR -sequences 64 -length 256 -seed 1 -out calibration.json
//	go run ./examples/calibrate -model DIR -tokens a.json b.txt -block 4 -out calibration.json -save DIR-FP8
//
// Token files: a .json file holds one JSON array of ids, or an array of such arrays; any
// other file holds one sequence of whitespace-separated ids. Sequences are cut into
// pieces of at most -length tokens.
//
// Without -model it builds a tiny model with random weights, so that it runs anywhere;
// its scales mean nothing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

// flags are the command's options.
type flags struct {
	modelDir  string
	sequences int
	length    int
	seed      uint64
	tokens    string
	block     int
	out       string
	save      string
	strategy  string
	head      bool
	dtype     string
	quiet     bool
}

func main() {
	log.SetFlags(0)
	var f flags
	flag.StringVar(&f.modelDir, "model", "", "checkpoint folder (default: a tiny model with random weights)")
	flag.IntVar(&f.sequences, "sequences", 64, "number of random token sequences (without -tokens)")
	flag.IntVar(&f.length, "length", 64, "length of the random sequences; token files are cut into pieces this long")
	flag.Uint64Var(&f.seed, "seed", 1, "seed of the random sequences")
	flag.StringVar(&f.tokens, "tokens", "", "token files (.json arrays, or whitespace-separated ids), comma-separated or as arguments")
	flag.IntVar(&f.block, "block", quant.DefaultCalibrationBlockSize, "attention block size of the calibration passes (1: causal)")
	flag.StringVar(&f.out, "out", "calibration.json", "calibration file to write")
	flag.StringVar(&f.save, "save", "", "also write the FP8 model as a compressed-tensors checkpoint folder here")
	flag.StringVar(&f.strategy, "strategy", string(quant.StrategyChannel), "weight scales for -save: channel or tensor")
	flag.BoolVar(&f.head, "head", false, "with -save, quantize lm_head too")
	flag.StringVar(&f.dtype, "dtype", "", "compute dtype: float32 or bfloat16 (default: the backend's)")
	flag.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	flag.Parse()
	// Token files may be listed after -tokens and among the flags: collect the
	// arguments that are not flags, parsing the flags that follow them.
	var files []string
	for args := flag.Args(); len(args) > 0; {
		if strings.HasPrefix(args[0], "-") && args[0] != "-" {
			_ = flag.CommandLine.Parse(args) // Exits on error.
			args = flag.Args()
			continue
		}
		files = append(files, args[0])
		args = args[1:]
	}
	if err := run(f, files, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// check refuses flags out of range, naming them; -length is checked against the
// model's positions once it is loaded.
func (f flags) check() error {
	var errs []error
	if f.sequences < 1 {
		errs = append(errs, fmt.Errorf("-sequences %d: want at least 1", f.sequences))
	}
	if f.length < 1 {
		errs = append(errs, fmt.Errorf("-length %d: want at least 1", f.length))
	}
	if f.block < 1 {
		errs = append(errs, fmt.Errorf("-block %d: want at least 1 (1: causal attention)", f.block))
	}
	if s := quant.Strategy(f.strategy); s != quant.StrategyChannel && s != quant.StrategyTensor {
		errs = append(errs, fmt.Errorf("-strategy %q: want channel or tensor", f.strategy))
	}
	if f.out == "" {
		errs = append(errs, errors.New("-out: a calibration file to write is needed"))
	}
	return errors.Join(errs...)
}

// run calibrates (and saves) as the flags say, printing to w.
func run(f flags, extraTokenFiles []string, w io.Writer) error {
	if err := f.check(); err != nil {
		return err
	}
	b, choice, err := backend.New()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "backend: %s\n", choice)
	m, err := loadModel(b, f, w)
	if err != nil {
		return err
	}
	defer m.Close()

	seqs, source, err := sequences(f, extraTokenFiles, m.Config)
	if err != nil {
		return err
	}
	opts := quant.CalibrateOptions{BlockSize: f.block}
	if !f.quiet {
		opts.Progress = os.Stderr
	}
	cal, err := quant.Calibrate(m, seqs, opts)
	if err != nil {
		return err
	}
	if err := cal.WriteFile(f.out); err != nil {
		return err
	}
	fmt.Fprintf(w, "calibrated on %d sequences (%d tokens, %s), block size %d\n", cal.Sequences, cal.Tokens, source, cal.BlockSize)
	if err := printLayers(w, cal, m.Config); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", f.out)
	if f.save != "" {
		return save(m, cal, f, w)
	}
	return nil
}

// loadModel loads -model in the compute dtype, or builds the tiny random model.
func loadModel(b compute.Backend, f flags, w io.Writer) (*model.Model, error) {
	dtype := model.DefaultDType(b)
	switch f.dtype {
	case "":
	case "float32":
		dtype = dtypes.Float32
	case "bfloat16":
		dtype = dtypes.BFloat16
	default:
		return nil, fmt.Errorf("unknown -dtype %q (want float32 or bfloat16)", f.dtype)
	}
	if f.modelDir != "" {
		isFP8, err := quant.IsFP8Checkpoint(f.modelDir)
		if err != nil {
			return nil, err
		}
		if isFP8 {
			return nil, fmt.Errorf("%s is already an FP8 checkpoint: calibrate the unquantized model", f.modelDir)
		}
		m, err := model.Load(b, f.modelDir, model.LoadOptions{DType: dtype})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "model: %s (%s, %d layers, %s)\n", f.modelDir, m.Config.Architecture, m.Config.NumLayers, dtype)
		return m, nil
	}
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: 256, HiddenSize: 64, IntermediateSize: 128,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16, MaxPositionEmbeddings: 512,
		RMSNormEps: 1e-6, RopeTheta: 10000, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 64,
		BOSTokenID: 1, EOSTokenIDs: []int{2}, MaskTokenID: 255,
	}
	fmt.Fprintln(w, "model: no -model given, using a TINY RANDOM model (2 layers, hidden 64, random weights):")
	fmt.Fprintln(w, "       this only demonstrates the pipeline; its scales mean nothing")
	return model.NewRandom(b, cfg, dtype, int64(f.seed))
}

// sequences returns the calibration sequences and a description of where they came from.
func sequences(f flags, extra []string, cfg model.Config) ([][]int, string, error) {
	var files []string
	for _, name := range strings.Split(f.tokens, ",") {
		if name = strings.TrimSpace(name); name != "" {
			files = append(files, name)
		}
	}
	files = append(files, extra...)
	if f.length <= 0 || f.length > cfg.MaxPositionEmbeddings {
		return nil, "", fmt.Errorf("-length %d must be in [1, %d] (max_position_embeddings)", f.length, cfg.MaxPositionEmbeddings)
	}
	if len(files) == 0 {
		seqs, err := quant.RandomSequences(f.sequences, f.length, cfg.VocabSize, f.seed)
		return seqs, fmt.Sprintf("random tokens, seed %d", f.seed), err
	}
	seqs, err := quant.ReadTokenFiles(files...)
	if err != nil {
		return nil, "", err
	}
	seqs, err = quant.ChunkSequences(seqs, f.length)
	if err != nil {
		return nil, "", err
	}
	if len(seqs) == 0 {
		return nil, "", errors.New("the token files hold no tokens")
	}
	return seqs, fmt.Sprintf("%d token files", len(files)), nil
}

// printLayers prints each layer's input amax and scale, in forward order.
func printLayers(w io.Writer, cal *quant.Calibration, cfg model.Config) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\tinput amax\tinput scale\t")
	for _, name := range quant.LayerNames(cfg) {
		s, err := cal.InputScale(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%.4g\t%.4g\t\n", name, cal.Layers[name].InputAmax, s)
	}
	return tw.Flush()
}

// save quantizes the model with the calibration and writes it.
func save(m *model.Model, cal *quant.Calibration, f flags, w io.Writer) error {
	before := m.WeightBytes()
	opts := quant.Options{Strategy: quant.Strategy(f.strategy), Calibration: cal, QuantizeHead: f.head}
	if err := quant.QuantizeModel(m, opts); err != nil {
		return err
	}
	if err := quant.Save(m, f.save, quant.SaveOptions{SourceConfig: f.modelDir}); err != nil {
		return err
	}
	fmt.Fprintf(w, "quantized (%s weight scales, static input scales): weights %.2f MB -> %.2f MB on the device (%s)\n",
		opts.Strategy, float64(before)/1e6, float64(m.WeightBytes())/1e6, m.DType)
	fmt.Fprintf(w, "wrote the compressed-tensors checkpoint %s\n", f.save)
	return nil
}
