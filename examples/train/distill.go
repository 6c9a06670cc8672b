package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/train"
)

// distillOptions shape the distillation data: records of a context cut from the training
// ids, BOS first, followed by the base's greedy continuation.
type distillOptions struct {
	Records    int       // records to write at most
	Context    int       // tokens of training text in each context, at most
	MinContext int       // shortest context kept (shorter cuts are drawn again)
	NewTokens  int       // greedy tokens generated after each context, at most
	Batch      int       // contexts generated together
	Seed       uint64    // seed of the contexts' draw
	Deadline   time.Time // when set, no batch starts after it
	Log        io.Writer // progress lines, when set
}

// distillContexts draws n contexts from data: a window of at most opts.Context tokens at
// a random offset, cut to one document (from the window's last BOS, up to its first EOS
// after it), BOS first. A bounded number of draws keeps corrupt data from looping.
func distillContexts(data *train.Tokens, bos, eos, n int, opts distillOptions) ([][]int, error) {
	if len(data.IDs) <= opts.Context {
		return nil, fmt.Errorf("distill: %d training tokens are too few for contexts of %d", len(data.IDs), opts.Context)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x64697374))
	out := make([][]int, 0, n)
	for draws := 0; len(out) < n; draws++ {
		if draws >= 20*n+100 {
			return nil, fmt.Errorf("distill: %d draws gave %d contexts of at least %d tokens of one document", draws, len(out), opts.MinContext)
		}
		start := rng.IntN(len(data.IDs) - opts.Context)
		w := data.IDs[start : start+opts.Context]
		for i := len(w) - 1; i >= 0; i-- {
			if w[i] == uint16(bos) {
				w = w[i+1:]
				break
			}
		}
		if i := slices.Index(w, uint16(eos)); i >= 0 {
			w = w[:i]
		}
		if len(w) < opts.MinContext {
			continue
		}
		ctx := make([]int, 0, len(w)+1)
		ctx = append(ctx, bos)
		for _, id := range w {
			ctx = append(ctx, int(id))
		}
		out = append(out, ctx)
	}
	return out, nil
}

// distill writes the base's greedy continuations of contexts drawn from data, in the
// token-ids format: each record is its context, the continuation and, when the base
// stopped, EOS. It returns the records' ids.
func distill(ctx context.Context, base *model.Model, data *train.Tokens, opts distillOptions) (*train.Tokens, error) {
	cfg := base.Config
	if len(cfg.EOSTokenIDs) == 0 || cfg.BOSTokenID < 0 {
		return nil, errors.New("distill: the base names no BOS or EOS")
	}
	if cfg.VocabSize != data.Vocab {
		return nil, fmt.Errorf("distill: the base's vocabulary of %d is not the data's %d", cfg.VocabSize, data.Vocab)
	}
	if opts.Records < 1 || opts.Batch < 1 || opts.NewTokens < 1 || opts.Context < 1 {
		return nil, fmt.Errorf("distill: records %d, batch %d, new tokens %d and context %d must be positive",
			opts.Records, opts.Batch, opts.NewTokens, opts.Context)
	}
	eos := cfg.EOSTokenIDs[0]
	contexts, err := distillContexts(data, cfg.BOSTokenID, eos, opts.Records, opts)
	if err != nil {
		return nil, err
	}
	dc := diffusion.DefaultConfig()
	dc.Mode, dc.MaxNewTokens = diffusion.Autoregressive, opts.NewTokens
	dec, err := diffusion.New(base, dc)
	if err != nil {
		return nil, err
	}
	out := &train.Tokens{Vocab: data.Vocab}
	began, generated := time.Now(), 0
	for i := 0; i < len(contexts); i += opts.Batch {
		if !opts.Deadline.IsZero() && time.Now().After(opts.Deadline) {
			break
		}
		batch := contexts[i:min(i+opts.Batch, len(contexts))]
		results, err := dec.GenerateBatch(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("distill: records %d to %d: %w", i, i+len(batch), err)
		}
		for j, r := range results {
			for _, id := range batch[j] {
				out.IDs = append(out.IDs, uint16(id))
			}
			for _, id := range r.Tokens {
				out.IDs = append(out.IDs, uint16(id))
			}
			if r.Finish == diffusion.FinishStop {
				out.IDs = append(out.IDs, uint16(eos))
			}
			generated += len(r.Tokens)
		}
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "distill: %d records, %d tokens generated, %.0f tokens/s\n",
				i+len(batch), generated, float64(generated)/time.Since(began).Seconds())
		}
	}
	if len(out.IDs) == 0 {
		return nil, errors.New("distill: the deadline left no time for one batch")
	}
	return out, nil
}

// distillStage is -stage distill: the base's (-base) greedy continuations of contexts
// cut from -train, written to -out as a token-ids file that -stage convert trains on.
func distillStage(ctx context.Context, b compute.Backend, f flags, dtype dtypes.DType, start time.Time, out io.Writer) error {
	if f.baseDir == "" || f.trainPath == "" || f.outDir == "" {
		return errors.New("-stage distill needs -base, -train and -out")
	}
	data, err := train.ReadTokens(f.trainPath)
	if err != nil {
		return err
	}
	base, err := model.Load(b, f.baseDir, model.LoadOptions{DType: dtype})
	if err != nil {
		return err
	}
	defer base.Close()
	opts := distillOptions{Records: f.records, Context: f.context, MinContext: min(16, f.context), NewTokens: f.maxNew,
		Batch: f.batch, Seed: f.seed, Log: os.Stderr}
	if f.maxTime > 0 {
		opts.Deadline = start.Add(f.maxTime - f.reserve)
	}
	log.Printf("distill %s: %d records of up to %d context and %d greedy tokens, batch %d", f.baseDir, opts.Records, opts.Context, opts.NewTokens, opts.Batch)
	began := time.Now()
	d, err := distill(ctx, base, data, opts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.outDir, d.Bytes(), 0o644); err != nil {
		return fmt.Errorf("distill: %w", err)
	}
	fmt.Fprintf(out, "distill: wrote %d tokens to %s in %.1fs\n", len(d.IDs), f.outDir, time.Since(began).Seconds())
	return nil
}
