package train

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/blockdiff/blockdiff/model"
)

// PeakFLOPS is the bfloat16 dense GEMM ceiling MFU is measured against: an H200's, 790
// TFLOP/s.
const PeakFLOPS = 790e12

// FlopsPerToken is the work of one trained token (forward and backward) of a model of
// cfg over windows of w tokens: 6·N + 12·L·w·H·d, where N counts the weights of the
// linear layers and the head (the embedding's gather is free), 6·N the products of
// forward (2·N) and backward (4·N), and 12·L·w·H·d attention's scores and weighted sums
// (2·2·w·H·d a token and layer forward, three times that with backward) over the whole
// window, as the plain attention computes them, masked or not.
func FlopsPerToken(cfg model.Config, w int) float64 {
	h, d, inter := float64(cfg.HiddenSize), float64(cfg.HeadDim), float64(cfg.IntermediateSize)
	heads, kv := float64(cfg.NumHeads), float64(cfg.NumKVHeads)
	perLayer := h*(heads+2*kv)*d + heads*d*h + 2*h*inter + inter*h
	n := float64(cfg.NumLayers)*perLayer + float64(cfg.VocabSize)*h
	return 6*n + 12*float64(cfg.NumLayers)*float64(w)*heads*d
}

// RunOptions configure [Trainer.Run].
type RunOptions struct {
	// Steps is the step count to stop at (restored steps included); 0 is the schedule's
	// Total.
	Steps int
	// Deadline, when set, stops the run before a step that would end after it (by the
	// pace of the last log interval), so that a run under a wall-time limit stops
	// cleanly and checkpoints.
	Deadline time.Time
	// LogEvery is the number of steps between reads of the statistics (each read waits
	// for the device), log lines and progress updates; 0 is 50.
	LogEvery int
	// Log receives a line per read: step, loss, learning rate, gradient norm, tokens/s
	// and MFU; nil logs nothing.
	Log io.Writer
	// Progress, when set, shows a progress bar with the loss and tokens/s.
	Progress io.Writer
	// Eval, when set, is evaluated every EvalEvery steps over at most EvalBatches
	// batches (0: all), and wholly at the end, with EvalBytes the size of its text (see
	// [Trainer.Evaluate]).
	Eval        *Tokens
	EvalBytes   int64
	EvalEvery   int
	EvalBatches int
	// CheckpointDir, when set, receives a checkpoint every CheckpointEvery steps (0:
	// only at the end) and when the run stops, for whatever reason but an error.
	CheckpointDir   string
	CheckpointEvery int
	Save            SaveOptions
	// FlopsPerToken is the work of a step per target for MFU; 0 is [FlopsPerToken] of
	// the model over windows of the sequence length (objectives whose forward covers
	// more, such as a doubled sequence, pass their own).
	FlopsPerToken float64
}

// Report summarises a run.
type Report struct {
	// Steps is the step count reached; Tokens the targets trained on during the run.
	Steps  int
	Tokens int64
	// Last are the statistics of the last log interval.
	Last Stats
	// Eval is the last evaluation's result, if any.
	Eval *Eval
	// TokensPerSecond over the run, excluding evaluations and checkpoints; MFU against
	// [PeakFLOPS] of each of the trainer's devices.
	TokensPerSecond, MFU float64
	// Stopped says why the run ended: "done", "deadline" or "canceled".
	Stopped string
}

// Run trains until the step count, the deadline or the context's end, logging every
// LogEvery steps, evaluating and checkpointing as the options ask.
func (t *Trainer) Run(ctx context.Context, opts RunOptions) (Report, error) {
	target := opts.Steps
	if target <= 0 {
		target = t.cfg.Schedule.Total
	}
	every := opts.LogEvery
	if every <= 0 {
		every = 50
	}
	tokensPerStep := int64(t.cfg.Batch * t.cfg.SeqLen)
	flops := opts.FlopsPerToken
	if flops <= 0 {
		flops = FlopsPerToken(t.m.Config, t.cfg.SeqLen)
	}
	var bar *progressbar.ProgressBar
	if opts.Progress != nil {
		bar = progressbar.NewOptions(target, progressbar.OptionSetWriter(opts.Progress), progressbar.OptionShowCount(),
			progressbar.OptionSetDescription("training"), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionOnCompletion(func() { _, _ = fmt.Fprintln(opts.Progress) }))
		_ = bar.Set(t.step)
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			if bar != nil {
				_ = bar.Clear()
			}
			_, _ = fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	rep := Report{Stopped: "done"}
	var busy time.Duration // wall time of the steps, evaluations and checkpoints excluded
	var pace time.Duration // per step, over the last interval
	intervalStart, intervalSteps := time.Now(), 0
	evaluate := func(batches int) error {
		if opts.Eval == nil {
			return nil
		}
		e, err := t.Evaluate(ctx, opts.Eval, opts.EvalBytes, batches)
		if err != nil {
			return err
		}
		rep.Eval = &e
		logf("eval at step %d: %s", t.step, e)
		return nil
	}
	save := func() error {
		if opts.CheckpointDir == "" {
			return nil
		}
		start := time.Now()
		if err := t.Save(opts.CheckpointDir, opts.Save); err != nil {
			return err
		}
		logf("checkpoint at step %d in %s (%.1fs)", t.step, opts.CheckpointDir, time.Since(start).Seconds())
		return nil
	}
	// sync reads the statistics, logs them and restarts the interval's clock.
	sync := func() error {
		stats, err := t.ReadStats()
		if err != nil {
			return err
		}
		elapsed := time.Since(intervalStart)
		busy += elapsed
		if intervalSteps > 0 {
			pace = elapsed / time.Duration(intervalSteps)
			rate := float64(int64(intervalSteps)*tokensPerStep) / elapsed.Seconds()
			logf("step %d/%d  loss %.4f  lr %.3g  gnorm %.3f  %.0f tok/s  MFU %.1f%%", t.step, target, stats.Loss,
				stats.LR, stats.GradNorm, rate, 100*rate*flops/(PeakFLOPS*float64(t.plan.Devices)))
			if bar != nil {
				bar.Describe(fmt.Sprintf("loss %.3f  %.0fk tok/s", stats.Loss, rate/1000))
			}
			rep.Last = stats
		}
		intervalStart, intervalSteps = time.Now(), 0
		return nil
	}
	for t.step < target {
		if err := ctx.Err(); err != nil {
			rep.Stopped = "canceled"
			break
		}
		if !opts.Deadline.IsZero() && time.Now().Add(pace).After(opts.Deadline) {
			rep.Stopped = "deadline"
			break
		}
		if err := t.Step(); err != nil {
			return rep, err
		}
		rep.Tokens += tokensPerStep
		intervalSteps++
		if bar != nil {
			_ = bar.Add(1)
		}
		if t.step%every == 0 || t.step == target {
			if err := sync(); err != nil {
				return rep, err
			}
		}
		evalNow := opts.EvalEvery > 0 && t.step%opts.EvalEvery == 0 && t.step < target
		saveNow := opts.CheckpointEvery > 0 && t.step%opts.CheckpointEvery == 0 && t.step < target
		if (evalNow || saveNow) && intervalSteps > 0 {
			if err := sync(); err != nil { // so that their time stays out of the pace
				return rep, err
			}
		}
		if evalNow {
			if err := evaluate(opts.EvalBatches); err != nil {
				return rep, err
			}
		}
		if saveNow {
			if err := save(); err != nil {
				return rep, err
			}
		}
		if evalNow || saveNow {
			intervalStart = time.Now()
		}
	}
	if intervalSteps > 0 {
		if err := sync(); err != nil {
			return rep, err
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	rep.Steps = t.step
	if busy > 0 {
		rep.TokensPerSecond = float64(rep.Tokens) / busy.Seconds()
		rep.MFU = rep.TokensPerSecond * flops / (PeakFLOPS * float64(t.plan.Devices))
	}
	if rep.Stopped != "canceled" {
		if err := evaluate(0); err != nil {
			return rep, err
		}
	}
	return rep, save()
}
