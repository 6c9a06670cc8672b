package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/codeeval"
	"github.com/blockdiff/blockdiff/internal/decodeeval"
	"github.com/blockdiff/blockdiff/internal/gocorpus"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/tokenizer"
	"github.com/blockdiff/blockdiff/train"
)

// tokenizerFiles are the files a checkpoint folder needs besides its weights to be run by
// examples/generate.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json"}

// copyFiles copies the named files of one folder into another, skipping absent ones.
func copyFiles(from, to string, names ...string) error {
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// convertAR fine-tunes the autoregressive checkpoint -base into a block-diffusion one.
func convertAR(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, start time.Time, out io.Writer) error {
	if f.baseDir == "" || f.trainPath == "" || f.ckpt == "" {
		return errors.New("-stage convert needs -base, -train and -ckpt")
	}
	data, heldOut, err := readSplits(f)
	if err != nil {
		return err
	}
	base, err := model.Load(b, f.baseDir, model.LoadOptions{DType: dtype})
	if err != nil {
		return err
	}
	defer base.Close()
	cfg := base.Config
	cur := train.Curriculum{Block: f.block, LargeBlock: f.largeBlock}
	steps := f.steps
	if steps <= 0 {
		steps = int((f.tokens + int64(f.batch*f.seq) - 1) / int64(f.batch*f.seq))
	}
	if f.largeBlock > 0 {
		cur.LargeUntil = int(f.largeFrac * float64(steps))
	}
	if err := cur.Validate(f.seq); err != nil {
		return err
	}
	o := train.DefaultBlockDiffusion(cfg.MaskTokenID)
	o.AnchorWeight, o.GuessWeight, o.KLWeight, o.KLAtFirstMasks = f.anchorWeight, f.guessWeight, f.klWeight, f.klFirstMasks
	klRows := "anchors"
	if o.KLAtFirstMasks {
		klRows += " and first masks"
	}
	log.Printf("convert %s: %d steps of %d×%d tokens, blocks of %d until step %d then %d; weights: anchor %g, guess %g, KL %g (at %s); lr %g → %g",
		f.baseDir, steps, f.batch, f.seq, cur.LargeBlock, cur.LargeUntil, cur.Block, o.AnchorWeight, o.GuessWeight, o.KLWeight, klRows, f.lr, f.minLR)
	compileStart := time.Now()
	tr, err := train.New(base, data, train.Config{
		DType: dtype, Batch: f.batch, SeqLen: f.seq,
		Schedule: train.Schedule{Peak: f.lr, Min: f.minLR, Warmup: f.warmup, Total: steps},
		AdamW:    train.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: f.wd},
		Clip:     f.clip, Seed: f.seed, BOS: cfg.BOSTokenID, Devices: f.devices,
		Objective:  o.Objective(cur),
		FrozenBase: o.KLWeight != 0,
	})
	if err != nil {
		return err
	}
	defer tr.Close()
	log.Printf("step program compiled in %.1fs", time.Since(compileStart).Seconds())
	// Per clean token: two masks, each a doubled window (forward and backward), and the
	// base's forward.
	rep, err := resumeAndRun(ctx, tr, f, start, train.RunOptions{Steps: steps, Eval: heldOut,
		FlopsPerToken: 4*train.FlopsPerToken(cfg, 2*f.seq) + train.FlopsPerToken(cfg, f.seq)/3})
	if err != nil {
		return err
	}
	if err := copyFiles(f.baseDir, f.ckpt, tokenizerFiles...); err != nil {
		return err
	}
	var n int64
	for _, p := range tr.Weights() {
		n += int64(p.Tensor.Shape().Size())
	}
	return summary(out, rep, rep.Eval, nil, n, time.Since(start))
}

// parseList parses a comma-separated list of numbers.
func parseList[T int | float64](s, flagName string) ([]T, error) {
	var out []T
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return nil, fmt.Errorf("-%s: %q is not a number", flagName, part)
		}
		out = append(out, T(v))
	}
	return out, nil
}

// loadPrompts reads code prompts from a gocorpus texts file.
func loadPrompts(tok *tokenizer.Tokenizer, path string, n int) ([]decodeeval.Prompt, error) {
	files, err := gocorpus.ReadTexts(path)
	if err != nil {
		return nil, err
	}
	var cf []codeeval.File
	for _, f := range files {
		cf = append(cf, codeeval.File{Path: f.Path, Data: []byte(f.Text)})
	}
	ps := codeeval.Prompts(cf, n, codeeval.PromptOptions{MaxLines: 15}) // bodies that a few hundred tokens close
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s holds no documented functions to prompt with", path)
	}
	return decodeeval.Encode(tok, ps)
}

// measureRow prints one measure.
func measureRow(w io.Writer, label string, m decodeeval.Measure) {
	fmt.Fprintf(w, "%s\t%.3f\t%.3f\t%.3f\t%d/%d\t%.3f\t%.0f\n", label, m.TokensPerForward(), m.RemaskRate(), m.Agreement(),
		m.Functions.Parsed, m.Functions.Closed, m.Functions.ParseRate(), m.TokensPerSecond())
}

const measureHeader = "decoder\ttokens/forward\tremask rate\tagreement@32\tparsed/closed\tparse rate\ttokens/s\n"

// selectDecoder sweeps the converted model's decoder settings on validation prompts,
// picks the presets from the data, records them in the checkpoint folder, and reports the
// chosen presets on held-out prompts. Agreement is measured against the greedy
// continuations of the AR base (-base), or of the model's own autoregressive decoding
// without one.
func selectDecoder(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, out io.Writer) error {
	if f.thresholds == "none" {
		return reportPresets(ctx, b, f, dtype, out)
	}
	if f.modelDir == "" || f.promptsPath == "" {
		return errors.New("-stage select needs -model and -prompts")
	}
	thresholds, err := parseList[float64](f.thresholds, "thresholds")
	if err != nil {
		return err
	}
	minReveals, err := parseList[int](f.minReveals, "min-reveals")
	if err != nil {
		return err
	}
	tok, conv, base, err := loadSelection(b, f, dtype)
	if err != nil {
		return err
	}
	defer closeModels(conv, base)
	prompts, err := loadPrompts(tok, f.promptsPath, f.maxPrompts)
	if err != nil {
		return err
	}
	s := selection{f: f, tok: tok, ctx: ctx}
	fmt.Fprintf(out, "validation: %d prompts from %s, %d new tokens, batch %d\n", len(prompts), f.promptsPath, f.maxNew, f.batch)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, measureHeader)
	ref, err := s.reference(tw, base, conv, prompts, f.batch)
	if err != nil {
		return err
	}
	type candidate struct {
		cfg  diffusion.Config
		meas decodeeval.Measure
	}
	var cands []candidate
	for _, mr := range minReveals {
		for _, th := range thresholds {
			c := s.config(diffusion.Fused, th, mr)
			m, err := s.run(conv, c, prompts, ref.Outputs, f.batch)
			if err != nil {
				return err
			}
			cands = append(cands, candidate{c, m})
			measureRow(tw, fmt.Sprintf("converted, fused τ %.2f k %d", th, mr), m)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Quality: the most tokens per forward within 5 % of the best parse rate and the best
	// agreement that any setting reaches; speed: within 15 %. The best setting on both
	// qualifies, else the one of the best parse rate.
	var bestParse, bestAgree float64
	for _, c := range cands {
		bestParse, bestAgree = max(bestParse, c.meas.Functions.ParseRate()), max(bestAgree, c.meas.Agreement())
	}
	pick := func(tol float64) candidate {
		var best candidate
		found := false
		for _, c := range cands {
			ok := c.meas.Functions.ParseRate() >= (1-tol)*bestParse && c.meas.Agreement() >= (1-tol)*bestAgree
			if ok && (!found || c.meas.TokensPerForward() > best.meas.TokensPerForward()) {
				best, found = c, true
			}
		}
		if !found {
			for _, c := range cands {
				if !found || c.meas.Functions.ParseRate() > best.meas.Functions.ParseRate() {
					best, found = c, true
				}
			}
		}
		return best
	}
	quality, speed := pick(0.05), pick(0.15)
	presets := diffusion.Presets{
		"quality": {BlockSize: quality.cfg.BlockSize, Threshold: quality.cfg.Threshold, MinReveal: quality.cfg.MinReveal},
		"speed":   {BlockSize: speed.cfg.BlockSize, Threshold: speed.cfg.Threshold, MinReveal: speed.cfg.MinReveal},
	}
	if err := diffusion.WritePresets(f.modelDir, presets); err != nil {
		return err
	}
	fmt.Fprintf(out, "picked: quality τ %.2f k %d (%.3f tokens/forward), speed τ %.2f k %d (%.3f); wrote %s\n",
		quality.cfg.Threshold, quality.cfg.MinReveal, quality.meas.TokensPerForward(),
		speed.cfg.Threshold, speed.cfg.MinReveal, speed.meas.TokensPerForward(),
		filepath.Join(f.modelDir, diffusion.GenerationConfigFile))
	if f.evalPromptsPath == "" {
		return nil
	}
	return s.reportHeldOut(out, base, conv, presets)
}

// reportPresets is -stage select with -thresholds none: no sweep, the held-out report of
// the presets that -model's folder records (against the base's greedy continuations
// with -base, else the model's own autoregressive decoding).
func reportPresets(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, out io.Writer) error {
	if f.modelDir == "" || f.evalPromptsPath == "" {
		return errors.New("-stage select -thresholds none needs -model and -eval-prompts")
	}
	presets, err := diffusion.LoadPresets(f.modelDir)
	if err != nil {
		return err
	}
	tok, conv, base, err := loadSelection(b, f, dtype)
	if err != nil {
		return err
	}
	defer closeModels(conv, base)
	return selection{f: f, tok: tok, ctx: ctx}.reportHeldOut(out, base, conv, presets)
}

// loadSelection loads what the select stage measures: -model's tokenizer and weights
// (FP8 ones included) and, with -base, the AR base (else nil).
func loadSelection(b compute.Backend, f flags, dtype dtypes.DType) (*tokenizer.Tokenizer, *model.Model, *model.Model, error) {
	tok, err := tokenizer.LoadDir(f.modelDir)
	if err != nil {
		return nil, nil, nil, err
	}
	conv, err := loadAny(b, f.modelDir, dtype)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.baseDir == "" {
		return tok, conv, nil, nil
	}
	base, err := model.Load(b, f.baseDir, model.LoadOptions{DType: dtype})
	if err != nil {
		conv.Close()
		return nil, nil, nil, err
	}
	return tok, conv, base, nil
}

// closeModels closes the models that are not nil.
func closeModels(ms ...*model.Model) {
	for _, m := range ms {
		if m != nil {
			m.Close()
		}
	}
}

// loadAny loads a checkpoint folder, FP8 ones included.
func loadAny(b compute.Backend, dir string, dtype dtypes.DType) (*model.Model, error) {
	fp8, err := quant.IsFP8Checkpoint(dir)
	if err != nil {
		return nil, err
	}
	if fp8 {
		return quant.Load(b, dir, quant.Options{}, model.LoadOptions{DType: dtype})
	}
	return model.Load(b, dir, model.LoadOptions{DType: dtype})
}

// selection holds what the select stage's measurements share.
type selection struct {
	f   flags
	tok *tokenizer.Tokenizer
	ctx context.Context
}

func (s selection) config(mode diffusion.Mode, threshold float64, minReveal int) diffusion.Config {
	c := diffusion.DefaultConfig()
	c.Mode, c.BlockSize, c.Threshold, c.MinReveal, c.MaxNewTokens = mode, s.f.block, threshold, minReveal, s.f.maxNew
	return c
}

func (s selection) run(m *model.Model, c diffusion.Config, ps []decodeeval.Prompt, ref [][]int, batch int) (decodeeval.Measure, error) {
	return decodeeval.Run(s.ctx, m, s.tok, ps, c, decodeeval.Options{Batch: batch, Reference: ref})
}

// reference decodes the prompts autoregressively with the base (when there is one) and
// the converted model, prints both, and returns the reference of agreement: the base's.
func (s selection) reference(tw io.Writer, base, conv *model.Model, ps []decodeeval.Prompt, batch int) (decodeeval.Measure, error) {
	arCfg := s.config(diffusion.Autoregressive, 0.9, 1)
	var ref decodeeval.Measure
	if base != nil {
		r, err := s.run(base, arCfg, ps, nil, batch)
		if err != nil {
			return ref, err
		}
		r.AgreedTokens, r.Agreeable = 1, 1 // the reference agrees with itself
		measureRow(tw, fmt.Sprintf("AR base, autoregressive, batch %d", batch), r)
		ref = r
	}
	own, err := s.run(conv, arCfg, ps, ref.Outputs, batch)
	if err != nil {
		return ref, err
	}
	if base == nil {
		own.AgreedTokens, own.Agreeable = 1, 1
		ref = own
	}
	measureRow(tw, fmt.Sprintf("converted, autoregressive, batch %d", batch), own)
	return ref, nil
}

// reportHeldOut measures the AR decoding and the chosen presets on held-out prompts at
// several batch sizes, and the masked cross-entropy on held-out ids.
func (s selection) reportHeldOut(out io.Writer, base, conv *model.Model, presets diffusion.Presets) error {
	f := s.f
	prompts, err := loadPrompts(s.tok, f.evalPromptsPath, f.maxEvalPrompts)
	if err != nil {
		return err
	}
	batches, err := parseList[int](f.batches, "batches")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "held-out: %d prompts from %s, %d new tokens\n", len(prompts), f.evalPromptsPath, f.maxNew)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, measureHeader)
	for _, batch := range batches {
		ref, err := s.reference(tw, base, conv, prompts, batch)
		if err != nil {
			return err
		}
		for _, name := range []string{"quality", "speed"} {
			c, err := presets.Config(name)
			if err != nil {
				return err
			}
			c.MaxNewTokens = f.maxNew
			m, err := s.run(conv, c, prompts, ref.Outputs, batch)
			if err != nil {
				return err
			}
			measureRow(tw, fmt.Sprintf("converted, %s (τ %.2f k %d), batch %d", name, c.Threshold, c.MinReveal, batch), m)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.heldOutPath == "" {
		return nil
	}
	data, err := train.ReadTokens(f.heldOutPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "held-out teacher-forced cross-entropy (nats/token), blocks of %d:\n", f.block)
	for _, m := range []struct {
		name string
		m    *model.Model
	}{{"AR base", base}, {"converted", conv}} {
		if m.m == nil {
			continue
		}
		ce, err := nextTokenLoss(m.m, data, f.seq, f.evalBatches)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s, next token (causal): %.4f\n", m.name, ce)
	}
	dense, label := conv, "converted"
	if _, err := modelcore.Of(conv).TrainableParams(); err != nil {
		// The training forward needs dense layers: an FP8 checkpoint's weights, decoded.
		if dense, err = loadAny(modelcore.Of(conv).Backend(), f.modelDir, conv.DType); err != nil {
			return err
		}
		defer dense.Close()
		if err := quant.Dequantize(dense); err != nil {
			return err
		}
		label = "converted (FP8 weights decoded, activations unquantized)"
	}
	ev, err := train.EvaluateBlockDiffusion(s.ctx, dense, data, train.BlockDiffusionEvalOptions{
		BlockSize: f.block, Batch: f.evalBatch, SeqLen: f.seq, MaxBatches: f.evalBatches,
		BOS: conv.Config.BOSTokenID, MaskID: conv.Config.MaskTokenID, Seed: 1})
	if err != nil {
		return err
	}
	for k, v := range ev.Masked {
		fmt.Fprintf(out, "  %s, %d of %d masked: %.4f (%d targets)\n", label, k+1, f.block-1, v, ev.Targets[k])
	}
	fmt.Fprintf(out, "  %s, next anchor at a commit: %.4f; fused guess with one mask left: %.4f\n", label, ev.Anchor, ev.Guess)
	return nil
}

// calibrate measures static FP8 scales on validation windows, quantizes the converted
// model (W8A8, or weights only with -fp8-activations none) and writes it as the demo's
// folder, and compares FP8 with bf16 on held-out text.
func calibrate(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, out io.Writer) error {
	if f.modelDir == "" || f.calibPath == "" || f.outDir == "" {
		return errors.New("-stage calibrate needs -model, -calib and -out")
	}
	if f.fp8Activations != "static" && f.fp8Activations != "none" {
		return fmt.Errorf("-fp8-activations %q: want static or none", f.fp8Activations)
	}
	calData, err := train.ReadTokens(f.calibPath)
	if err != nil {
		return err
	}
	m, err := model.Load(b, f.modelDir, model.LoadOptions{DType: dtype})
	if err != nil {
		return err
	}
	defer m.Close()
	var seqs [][]int
	for i := 0; i+f.seq <= len(calData.IDs) && len(seqs) < f.calibSeqs; i += f.seq {
		seq := make([]int, f.seq)
		for j := range seq {
			seq[j] = int(calData.IDs[i+j])
		}
		seqs = append(seqs, seq)
	}
	cal, err := quant.Calibrate(m, seqs, quant.CalibrateOptions{BlockSize: f.block})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "calibrated on %d validation windows of %d tokens, blocks of %d\n", cal.Sequences, f.seq, f.block)

	var heldOut *train.Tokens
	if f.heldOutPath != "" {
		if heldOut, err = train.ReadTokens(f.heldOutPath); err != nil {
			return err
		}
	}
	var tok *tokenizer.Tokenizer
	var prompts []decodeeval.Prompt
	if f.evalPromptsPath != "" {
		if tok, err = tokenizer.LoadDir(f.modelDir); err != nil {
			return err
		}
		if prompts, err = loadPrompts(tok, f.evalPromptsPath, f.maxEvalPrompts); err != nil {
			return err
		}
	}
	presets, err := diffusion.LoadPresets(f.modelDir)
	if err != nil {
		return err
	}
	quality, err := presets.Config("quality")
	if err != nil {
		return err
	}
	quality.MaxNewTokens = f.maxNew
	measure := func(subject *model.Model, label string, ref [][]int) ([][]int, error) {
		line := label
		if heldOut != nil {
			ce, err := nextTokenLoss(subject, heldOut, f.seq, f.evalBatches)
			if err != nil {
				return nil, err
			}
			line += fmt.Sprintf(": held-out next-token cross-entropy %.4f nats/token", ce)
		}
		var outputs [][]int
		if prompts != nil {
			meas, err := decodeeval.Run(ctx, subject, tok, prompts, quality, decodeeval.Options{Batch: f.batch, Reference: ref})
			if err != nil {
				return nil, err
			}
			line += fmt.Sprintf("; quality preset on %d held-out prompts: %.3f tokens/forward, parse rate %.3f (%d/%d)",
				len(prompts), meas.TokensPerForward(), meas.Functions.ParseRate(), meas.Functions.Parsed, meas.Functions.Closed)
			if ref != nil {
				line += fmt.Sprintf(", agreement@32 with the unquantized model %.3f", meas.Agreement())
			}
			outputs = meas.Outputs
		}
		fmt.Fprintln(out, line)
		return outputs, nil
	}
	ref, err := measure(m, fmt.Sprintf("%s (%.1f MB of weights)", m.DType, float64(m.WeightBytes())/1e6), nil)
	if err != nil {
		return err
	}
	if err := quant.QuantizeModel(m, quant.Options{Calibration: cal}); err != nil {
		return err
	}
	if _, err := measure(m, fmt.Sprintf("FP8 W8A8, static input scales (%.1f MB of weights)", float64(m.WeightBytes())/1e6), ref); err != nil {
		return err
	}
	saved := m
	if f.fp8Activations == "none" {
		// The same FP8 weights with bf16 inputs, from a fresh copy of the model.
		if saved, err = model.Load(b, f.modelDir, model.LoadOptions{DType: dtype}); err != nil {
			return err
		}
		defer saved.Close()
		if err := quant.QuantizeModel(saved, quant.Options{}); err != nil {
			return err
		}
		if _, err := measure(saved, fmt.Sprintf("FP8 weight-only (%.1f MB of weights)", float64(saved.WeightBytes())/1e6), ref); err != nil {
			return err
		}
	}
	if err := quant.Save(saved, f.outDir, quant.SaveOptions{SourceConfig: f.modelDir, ShardBytes: f.shardBytes}); err != nil {
		return err
	}
	if err := copyFiles(f.modelDir, f.outDir, append(slices.Clone(tokenizerFiles), diffusion.GenerationConfigFile)...); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the FP8 checkpoint %s\n", f.outDir)
	return nil
}

// nextTokenLoss is the mean causal next-token cross-entropy of windows of data (at most
// maxWindows, 0: all), from the inference forward, so that it measures any model,
// quantized ones included.
func nextTokenLoss(m *model.Model, data *train.Tokens, seq, maxWindows int) (float64, error) {
	var nats float64
	var n int
	for start, w := 0, 0; start+seq+1 <= len(data.IDs) && (maxWindows <= 0 || w < maxWindows); start, w = start+seq, w+1 {
		window := make([]int, seq+1)
		for i := range window {
			window[i] = int(data.IDs[start+i])
		}
		logits, err := m.Logits(window[:seq], 1)
		if err != nil {
			return 0, err
		}
		for i, row := range logits {
			next := window[i+1]
			if next == m.Config.BOSTokenID {
				continue // a new document: nothing predicts it
			}
			top := float32(math.Inf(-1))
			for _, v := range row {
				top = max(top, v)
			}
			var sum float64
			for _, v := range row {
				sum += math.Exp(float64(v - top))
			}
			nats += math.Log(sum) - float64(row[next]-top)
			n++
		}
	}
	if n == 0 {
		return 0, errors.New("no held-out windows")
	}
	return nats / float64(n), nil
}
