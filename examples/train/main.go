// Command train trains a model from token-ids files (format: package train's ReadTokens)
// and evaluates checkpoints.
//
//	go run ./examples/train -stage ar -train train.ids -heldout heldout.ids -heldout-bytes 3145728 \
//	    -hidden 512 -layers 8 -heads 8 -kv-heads 2 -ffn 1408 -seq 512 -batch 32 -tokens 100000000 \
//	    -ckpt out/ar -max-time 9m30s
//	go run ./examples/train -stage eval -model out/ar -heldout heldout.ids -heldout-bytes 3145728
//
// Stage ar trains a Llama-shaped model from scratch (or resumes the checkpoint in -ckpt
// with -resume), writing checkpoints that model.Load opens: config.json (vocabulary
// from the ids file's header, mask_token_id its last row, BOS and EOS from the flags or
// the data), safetensors in bfloat16 sharded to -shard-bytes, and the optimizer state.
// It stops cleanly before -max-time (less -reserve for the last evaluation and
// checkpoint). Stage eval reports a checkpoint's held-out loss and bits per byte.
// Stages distill, convert, select and calibrate make a block-diffusion model from an AR
// one (the base's greedy continuations, the fine-tuning on them, the decoder's presets,
// FP8); bench/train.sh runs them in order, with their flags. With -devices N the ar and convert stages spread each step over N GPUs,
// data-parallel (package train's Config.Devices), on go-xla's backend.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/train"
)

// flags are the command's options.
type flags struct {
	stage                     string
	backend                   string
	devices                   int
	trainPath, heldOutPath    string
	heldOutBytes, trainBytes  int64
	modelDir                  string
	hidden, layers, heads, kv int
	headDim, ffn, maxPos      int
	ropeTheta                 float64
	untied                    bool
	bos, eos                  int
	seq, batch, steps         int
	tokens                    int64
	lr, minLR, wd, clip       float64
	warmup                    int
	seed                      uint64
	dtype                     string
	logEvery, evalEvery       int
	evalBatches               int
	ckpt                      string
	ckptEvery                 int
	resume                    bool
	maxTime, reserve          time.Duration
	shardBytes                int64
	quiet                     bool

	// Conversion, selection and calibration.
	baseDir, tokenizerDir        string
	block, largeBlock            int
	largeFrac                    float64
	anchorWeight, guessWeight    float64
	klWeight                     float64
	promptsPath, evalPromptsPath string
	maxPrompts, maxEvalPrompts   int
	maxNew, evalBatch            int
	thresholds, minReveals       string
	batches                      string
	calibPath, outDir            string
	calibSeqs                    int
	fp8Activations               string
	masked                       bool
	klFirstMasks                 bool
	records, context             int
}

func main() {
	log.SetFlags(0)
	var f flags
	flag.StringVar(&f.stage, "stage", "ar", "ar (train an autoregressive model), eval (evaluate -model), convert (fine-tune -base into a block-diffusion model), distill (-base's greedy continuations of -train contexts, for convert), select (pick -model's decoder presets) or calibrate (FP8 -model into -out)")
	flag.StringVar(&f.backend, "backend", "", "GoMLX backend configuration (default: the library's choice)")
	flag.IntVar(&f.devices, "devices", 1, "devices each training step spreads over, data-parallel (stages ar and convert; -batch a multiple of it); over several, our backend's plugin runs on go-xla's backend")
	flag.StringVar(&f.trainPath, "train", "", "training token-ids file")
	flag.StringVar(&f.heldOutPath, "heldout", "", "held-out token-ids file, evaluated every -eval-every steps and at the end")
	flag.Int64Var(&f.heldOutBytes, "heldout-bytes", 0, "bytes of text the held-out ids encode, for bits per byte")
	flag.Int64Var(&f.trainBytes, "train-bytes", 0, "bytes of text the training ids encode: when set, the whole training split is evaluated at the end too")
	flag.StringVar(&f.modelDir, "model", "", "checkpoint folder to evaluate (stage eval)")
	flag.IntVar(&f.hidden, "hidden", 512, "hidden size")
	flag.IntVar(&f.layers, "layers", 8, "layers")
	flag.IntVar(&f.heads, "heads", 8, "attention heads")
	flag.IntVar(&f.kv, "kv-heads", 2, "key/value heads")
	flag.IntVar(&f.headDim, "head-dim", 0, "head size (default: hidden/heads)")
	flag.IntVar(&f.ffn, "ffn", 1408, "MLP intermediate size")
	flag.IntVar(&f.maxPos, "max-pos", 4096, "max_position_embeddings written to config.json")
	flag.Float64Var(&f.ropeTheta, "rope-theta", 10000, "rotary base")
	flag.BoolVar(&f.untied, "untied", false, "a head of its own instead of the tied embeddings")
	flag.IntVar(&f.bos, "bos", -1, "BOS id (default: the training data's first token)")
	flag.IntVar(&f.eos, "eos", -1, "EOS id (default: the training data's last token)")
	flag.IntVar(&f.seq, "seq", 512, "targets per row (rows hold one token more)")
	flag.IntVar(&f.batch, "batch", 32, "rows per step")
	flag.IntVar(&f.steps, "steps", 0, "steps of the schedule (default: from -tokens)")
	flag.Int64Var(&f.tokens, "tokens", 100_000_000, "token budget, when -steps is 0: steps = tokens/(batch·seq)")
	flag.Float64Var(&f.lr, "lr", 3e-3, "peak learning rate")
	flag.Float64Var(&f.minLR, "min-lr", 3e-4, "learning rate at the end of the cosine decay")
	flag.IntVar(&f.warmup, "warmup", 200, "warmup steps")
	flag.Float64Var(&f.wd, "wd", 0.1, "decoupled weight decay of the linear layers")
	flag.Float64Var(&f.clip, "clip", 1, "global gradient norm bound (0: none)")
	flag.Uint64Var(&f.seed, "seed", 1, "seed of the initial weights, the data order and the objective")
	flag.StringVar(&f.dtype, "dtype", "", "compute dtype: bfloat16 or float32 (default: the backend's)")
	flag.IntVar(&f.logEvery, "log-every", 50, "steps between loss reads, log lines and progress updates")
	flag.IntVar(&f.evalEvery, "eval-every", 0, "steps between held-out evaluations (0: at the end only)")
	flag.IntVar(&f.evalBatches, "eval-batches", 0, "bound on the batches of the periodic evaluations (0: all); the last one covers everything")
	flag.StringVar(&f.ckpt, "ckpt", "", "checkpoint folder to write")
	flag.IntVar(&f.ckptEvery, "ckpt-every", 0, "steps between checkpoints (0: at the end only)")
	flag.BoolVar(&f.resume, "resume", false, "resume from -ckpt when it holds a checkpoint")
	flag.DurationVar(&f.maxTime, "max-time", 0, "wall time the command may take (0: no bound)")
	flag.DurationVar(&f.reserve, "reserve", 45*time.Second, "part of -max-time kept for the last evaluation and checkpoint")
	flag.Int64Var(&f.shardBytes, "shard-bytes", 15<<20, "bound on each checkpoint file (0: one file each)")
	flag.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	flag.StringVar(&f.tokenizerDir, "tokenizer", "", "stage ar: folder whose tokenizer.json and tokenizer_config.json are copied into the checkpoint")
	flag.StringVar(&f.baseDir, "base", "", "the autoregressive checkpoint (stages convert and select)")
	flag.IntVar(&f.block, "block", 4, "block size of the conversion's end, the selection and the calibration")
	flag.IntVar(&f.largeBlock, "large-block", 8, "stage convert: block size of the curriculum's first part (0: none)")
	flag.Float64Var(&f.largeFrac, "large-frac", 0.3, "stage convert: fraction of the steps with -large-block")
	flag.Float64Var(&f.anchorWeight, "anchor-weight", 1, "stage convert: weight of the commit's next-anchor term")
	flag.Float64Var(&f.guessWeight, "guess-weight", 0.5, "stage convert: weight of the fused guess's term")
	flag.Float64Var(&f.klWeight, "kl-weight", 1, "stage convert: weight of the KL term to the frozen base (0: none)")
	flag.BoolVar(&f.klFirstMasks, "kl-first-masks", false, "stage convert: the KL term also at the noisy rows before a block's masked tail")
	flag.StringVar(&f.promptsPath, "prompts", "", "stage select: texts (gocorpus .jsonl.gz) of the validation split, whose documented functions prompt the sweep")
	flag.StringVar(&f.evalPromptsPath, "eval-prompts", "", "stages select and calibrate: texts of the held-out split to report on")
	flag.IntVar(&f.maxPrompts, "max-prompts", 64, "stage select: validation prompts")
	flag.IntVar(&f.maxEvalPrompts, "max-eval-prompts", 128, "held-out prompts")
	flag.IntVar(&f.maxNew, "max-new", 64, "new tokens per prompt")
	flag.StringVar(&f.thresholds, "thresholds", "0.5,0.6,0.7,0.8,0.9,0.95", "stage select: thresholds swept (none: no sweep, the held-out report of -model's presets)")
	flag.StringVar(&f.minReveals, "min-reveals", "1,2", "stage select: minimum reveals swept")
	flag.StringVar(&f.batches, "batches", "1", "stage select: batch sizes of the held-out report")
	flag.IntVar(&f.evalBatch, "eval-batch", 16, "rows per evaluation execution")
	flag.StringVar(&f.calibPath, "calib", "", "stage calibrate: token-ids file (the validation split) to calibrate on")
	flag.IntVar(&f.calibSeqs, "calib-seqs", 64, "stage calibrate: windows of -seq tokens to calibrate on")
	flag.StringVar(&f.fp8Activations, "fp8-activations", "static", "stage calibrate: static (FP8 inputs with the calibrated scales, W8A8) or none (FP8 weights only, bf16 inputs; W8A8 is still measured)")
	flag.StringVar(&f.outDir, "out", "", "stage calibrate: folder of the FP8 checkpoint; stage distill: token-ids file to write")
	flag.IntVar(&f.records, "records", 16384, "stage distill: contexts the base continues")
	flag.IntVar(&f.context, "context", 128, "stage distill: training tokens of each context, at most")
	flag.BoolVar(&f.masked, "masked", false, "stage eval: also the masked cross-entropy of blocks of -block by masks per block")
	flag.Parse()
	start := time.Now()
	if err := run(f, start, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(f flags, start time.Time, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var b compute.Backend
	var err error
	if f.backend != "" {
		b, err = backend.NewWithConfig(f.backend)
		log.Printf("backend: %s", f.backend)
	} else {
		choice := backend.ForDevices(backend.Select(), f.devices)
		if b, err = backend.NewWithConfig(choice.Config); err != nil {
			err = fmt.Errorf("backend: creating %s: %w", choice, err)
		}
		log.Printf("backend: %s", choice)
	}
	if err != nil {
		return err
	}
	dtype := dtypes.InvalidDType
	switch f.dtype {
	case "":
	case "bfloat16", "bf16":
		dtype = dtypes.BFloat16
	case "float32", "f32":
		dtype = dtypes.Float32
	default:
		return fmt.Errorf("-dtype %q: want bfloat16 or float32", f.dtype)
	}
	switch f.stage {
	case "ar":
		return trainAR(ctx, b, f, dtype, start, out)
	case "eval":
		return evaluate(ctx, b, f, dtype, out)
	case "convert":
		return convertAR(ctx, b, f, dtype, start, out)
	case "select":
		return selectDecoder(ctx, b, f, dtype, out)
	case "calibrate":
		return calibrate(ctx, b, f, dtype, out)
	case "distill":
		return distillStage(ctx, b, f, dtype, start, out)
	}
	return fmt.Errorf("-stage %q: want ar, eval, convert, select, calibrate or distill", f.stage)
}

// readOptional reads a token-ids file, or returns nil for an empty path.
func readOptional(path string) (*train.Tokens, error) {
	if path == "" {
		return nil, nil
	}
	return train.ReadTokens(path)
}

// readSplits reads -train and, when given, -heldout, which must share a vocabulary.
func readSplits(f flags) (data, heldOut *train.Tokens, err error) {
	if data, err = train.ReadTokens(f.trainPath); err != nil {
		return nil, nil, err
	}
	if heldOut, err = readOptional(f.heldOutPath); err != nil {
		return nil, nil, err
	}
	if heldOut != nil && heldOut.Vocab != data.Vocab {
		return nil, nil, fmt.Errorf("%s has a vocabulary of %d, %s of %d", f.heldOutPath, heldOut.Vocab, f.trainPath, data.Vocab)
	}
	return data, heldOut, nil
}

func trainAR(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, start time.Time, out io.Writer) error {
	if f.trainPath == "" {
		return errors.New("-stage ar needs -train")
	}
	data, heldOut, err := readSplits(f)
	if err != nil {
		return err
	}
	if len(data.IDs) == 0 {
		return fmt.Errorf("%s holds no tokens", f.trainPath)
	}
	bos, eos := f.bos, f.eos
	if bos < 0 {
		bos = int(data.IDs[0])
	}
	if eos < 0 {
		eos = int(data.IDs[len(data.IDs)-1])
	}
	if bos == eos {
		return fmt.Errorf("BOS and EOS are both %d: pass -bos and -eos", bos)
	}
	headDim := f.headDim
	if headDim == 0 && f.heads > 0 {
		headDim = f.hidden / f.heads
	}
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: data.Vocab, HiddenSize: f.hidden, IntermediateSize: f.ffn,
		NumLayers: f.layers, NumHeads: f.heads, NumKVHeads: f.kv, HeadDim: headDim,
		MaxPositionEmbeddings: max(f.maxPos, f.seq+1), RMSNormEps: 1e-5, RopeTheta: f.ropeTheta, RopeAttentionFactor: 1,
		TieWordEmbeddings: !f.untied, ScaleEmb: 1, DimModelBase: float64(f.hidden),
		BOSTokenID: bos, EOSTokenIDs: []int{eos}, MaskTokenID: data.Vocab - 1,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	steps := f.steps
	if steps <= 0 {
		steps = int((f.tokens + int64(f.batch*f.seq) - 1) / int64(f.batch*f.seq))
	}
	m, err := model.NewRandom(b, cfg, dtypes.Float32, int64(f.seed))
	if err != nil {
		return err
	}
	defer m.Close()
	params, err := modelcore.Of(m).TrainableParams()
	if err != nil {
		return err
	}
	var n int64
	for _, p := range params {
		n += int64(p.Tensor.Shape().Size())
	}
	log.Printf("model: %d parameters (hidden %d, %d layers, %d heads × %d, %d KV heads, FFN %d, vocab %d, tied %v); %d steps of %d×%d tokens",
		n, cfg.HiddenSize, cfg.NumLayers, cfg.NumHeads, cfg.HeadDim, cfg.NumKVHeads, cfg.IntermediateSize, cfg.VocabSize,
		cfg.TieWordEmbeddings, steps, f.batch, f.seq)
	compileStart := time.Now()
	tr, err := train.New(m, data, train.Config{
		DType: dtype, Batch: f.batch, SeqLen: f.seq,
		Schedule: train.Schedule{Peak: f.lr, Min: f.minLR, Warmup: f.warmup, Total: steps},
		AdamW:    train.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: f.wd},
		Clip:     f.clip, Seed: f.seed, BOS: bos, Devices: f.devices,
	})
	if err != nil {
		return err
	}
	defer tr.Close()
	log.Printf("step program compiled in %.1fs (%d device(s))", time.Since(compileStart).Seconds(), max(f.devices, 1))
	rep, err := resumeAndRun(ctx, tr, f, start, train.RunOptions{Steps: steps, Eval: heldOut, EvalBytes: f.heldOutBytes})
	if err != nil {
		return err
	}
	if f.tokenizerDir != "" && f.ckpt != "" {
		if err := copyFiles(f.tokenizerDir, f.ckpt, tokenizerFiles...); err != nil {
			return err
		}
	}
	var trainEval *train.Eval
	if f.trainBytes > 0 {
		e, err := tr.Evaluate(ctx, data, f.trainBytes, 0)
		if err != nil {
			return err
		}
		trainEval = &e
	}
	return summary(out, rep, rep.Eval, trainEval, n, time.Since(start))
}

// resumeAndRun restores tr from -ckpt when -resume asks and a checkpoint is there, then
// runs it with opts completed from the flags: logs, evaluations, checkpoints, progress and
// the -max-time deadline.
func resumeAndRun(ctx context.Context, tr *train.Trainer, f flags, start time.Time, opts train.RunOptions) (train.Report, error) {
	if f.resume && f.ckpt != "" {
		if _, err := os.Stat(filepath.Join(f.ckpt, train.StateFileName)); err == nil {
			if err := tr.Restore(f.ckpt); err != nil {
				return train.Report{}, err
			}
			log.Printf("resumed from %s at step %d", f.ckpt, tr.Steps())
		}
	}
	opts.LogEvery, opts.Log = f.logEvery, os.Stderr
	opts.EvalEvery, opts.EvalBatches = f.evalEvery, f.evalBatches
	opts.CheckpointDir, opts.CheckpointEvery = f.ckpt, f.ckptEvery
	opts.Save = train.SaveOptions{MaxShardBytes: f.shardBytes}
	if !f.quiet {
		opts.Progress = os.Stderr
	}
	if f.maxTime > 0 {
		opts.Deadline = start.Add(f.maxTime - f.reserve)
	}
	return tr.Run(ctx, opts)
}

// summary prints the run's figures as a table.
func summary(w io.Writer, rep train.Report, heldOut, trainEval *train.Eval, params int64, wall time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...)
	}
	row("stopped", "%s at step %d", rep.Stopped, rep.Steps)
	row("parameters", "%d", params)
	row("tokens this run", "%d", rep.Tokens)
	row("tokens/s", "%.0f", rep.TokensPerSecond)
	row("MFU (790 TFLOP/s)", "%.1f%%", 100*rep.MFU)
	row("train loss (last interval)", "%.4f", rep.Last.Loss)
	for _, e := range []struct {
		name string
		eval *train.Eval
	}{{"train split", trainEval}, {"held-out", heldOut}} {
		if e.eval != nil {
			row(e.name+" loss", "%.4f nats/token (%d targets)", e.eval.Loss, e.eval.Targets)
			if e.eval.BitsPerByte > 0 {
				row(e.name+" bits/byte", "%.4f", e.eval.BitsPerByte)
			}
		}
	}
	row("wall time", "%s", wall.Round(time.Second))
	return tw.Flush()
}

func evaluate(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, out io.Writer) error {
	if f.modelDir == "" || f.heldOutPath == "" {
		return errors.New("-stage eval needs -model and -heldout")
	}
	data, err := train.ReadTokens(f.heldOutPath)
	if err != nil {
		return err
	}
	m, err := loadAny(b, f.modelDir, dtype)
	if err != nil {
		return err
	}
	defer m.Close()
	label := f.modelDir
	if _, err := modelcore.Of(m).TrainableParams(); err != nil {
		// Evaluation runs the training forward, which needs dense layers.
		if err := quant.Dequantize(m); err != nil {
			return err
		}
		label += " (FP8 weights decoded, activations unquantized)"
	}
	e, err := train.Evaluate(ctx, m, data, train.EvalOptions{Batch: f.batch, SeqLen: f.seq, BOS: m.Config.BOSTokenID,
		Bytes: f.heldOutBytes, MaxBatches: f.evalBatches})
	if err != nil {
		return err
	}
	if _, err = fmt.Fprintf(out, "%s: next token: %s\n", label, e); err != nil || !f.masked {
		return err
	}
	ev, err := train.EvaluateBlockDiffusion(ctx, m, data, train.BlockDiffusionEvalOptions{
		BlockSize: f.block, Batch: f.batch, SeqLen: f.seq, MaxBatches: f.evalBatches,
		BOS: m.Config.BOSTokenID, MaskID: m.Config.MaskTokenID, Seed: 1})
	if err != nil {
		return err
	}
	for k, v := range ev.Masked {
		fmt.Fprintf(out, "%s: %d of %d masked: %.4f nats/token (%d targets)\n", label, k+1, f.block-1, v, ev.Targets[k])
	}
	_, err = fmt.Fprintf(out, "%s: next anchor at a commit %.4f, fused guess with one mask left %.4f\n", label, ev.Anchor, ev.Guess)
	return err
}
