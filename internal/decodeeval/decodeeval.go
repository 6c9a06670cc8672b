// Package decodeeval measures a decoder on code prompts: tokens per forward (the prefill
// excluded), remasks, agreement of the first tokens with a reference decoding (the AR
// base's greedy continuation), and how many generated functions close and parse.
package decodeeval

import (
	"context"
	"fmt"
	"time"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/codeeval"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// Prompt is a code prompt with its token ids (BOS first).
type Prompt struct {
	codeeval.Prompt
	IDs []int
}

// Encode tokenizes prompts, BOS first, as training documents start.
func Encode(tok *tokenizer.Tokenizer, prompts []codeeval.Prompt) ([]Prompt, error) {
	out := make([]Prompt, len(prompts))
	for i, p := range prompts {
		ids, err := tok.Encode(p.Text)
		if err != nil {
			return nil, fmt.Errorf("decodeeval: prompt %s: %w", p.Name, err)
		}
		out[i] = Prompt{Prompt: p, IDs: ids}
	}
	return out, nil
}

// Measure is how one decoder configuration did over the prompts.
type Measure struct {
	Config diffusion.Config
	// Prompts decoded, Tokens generated, Forwards after the prefills, Commits (blocks
	// written) and Remasks (anchor guesses that were wrong).
	Prompts, Tokens, Forwards, Commits, Remasks int
	// AgreedTokens counts the leading tokens equal to the reference's, over at most
	// AgreeOver tokens of each prompt; Agreeable is the sum of those bounds.
	AgreedTokens, Agreeable int
	// Functions tallies whether the generations close their function and parse.
	Functions codeeval.Tally
	// Time is the decoding time of the prompts (compilation excluded).
	Time time.Duration
	// Outputs are the generated ids, one list per prompt.
	Outputs [][]int
}

// TokensPerForward is Tokens / Forwards (the prefill excluded).
func (m Measure) TokensPerForward() float64 { return ratio(m.Tokens, m.Forwards) }

// Agreement is the fraction of the first tokens equal to the reference's.
func (m Measure) Agreement() float64 { return ratio(m.AgreedTokens, m.Agreeable) }

// RemaskRate is the fraction of commits whose next block was remasked.
func (m Measure) RemaskRate() float64 { return ratio(m.Remasks, m.Commits) }

// TokensPerSecond is Tokens over Time.
func (m Measure) TokensPerSecond() float64 {
	if m.Time <= 0 {
		return 0
	}
	return float64(m.Tokens) / m.Time.Seconds()
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Options of [Run].
type Options struct {
	// Batch prompts are decoded together (default 1).
	Batch int
	// Reference, when not nil, holds one reference decoding per prompt to agree with.
	Reference [][]int
	// AgreeOver is how many leading tokens agreement counts (default 32).
	AgreeOver int
}

// Run decodes every prompt under cfg and measures it.
func Run(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, prompts []Prompt, cfg diffusion.Config, opts Options) (Measure, error) {
	if opts.Batch < 1 {
		opts.Batch = 1
	}
	if opts.AgreeOver < 1 {
		opts.AgreeOver = 32
	}
	if opts.Reference != nil && len(opts.Reference) != len(prompts) {
		return Measure{}, fmt.Errorf("decodeeval: %d references for %d prompts", len(opts.Reference), len(prompts))
	}
	dec, err := diffusion.New(m, cfg)
	if err != nil {
		return Measure{}, err
	}
	block := cfg.BlockSize
	if cfg.Mode == diffusion.Autoregressive {
		block = 1
	}
	meas := Measure{Config: cfg}
	for start := 0; start < len(prompts); start += opts.Batch {
		end := min(start+opts.Batch, len(prompts))
		ids := make([][]int, 0, end-start)
		for _, p := range prompts[start:end] {
			ids = append(ids, p.IDs)
		}
		results, err := dec.GenerateBatch(ctx, ids)
		if err != nil {
			return Measure{}, err
		}
		for i, r := range results {
			k := start + i
			s := r.Stats
			meas.Prompts++
			meas.Tokens += s.Tokens
			meas.Forwards += s.Forwards
			if len(prompts[k].IDs) >= block {
				meas.Forwards-- // the prefill
			}
			meas.Commits += s.Commits
			meas.Remasks += s.Remasks
			if opts.Reference != nil {
				n := min(opts.AgreeOver, len(opts.Reference[k]))
				meas.Agreeable += n
				meas.AgreedTokens += codeeval.Agreement(r.Tokens, opts.Reference[k], n)
			}
			meas.Functions.Add(codeeval.Judge(prompts[k].Text, tok.Decode(r.Tokens, true)))
			meas.Outputs = append(meas.Outputs, r.Tokens)
		}
		if len(results) > 0 {
			meas.Time += results[0].Stats.PrefillTime + results[0].Stats.DecodeTime
		}
	}
	return meas, nil
}
