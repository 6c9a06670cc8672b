package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
)

// decodeCase is one decoding configuration to time.
type decodeCase struct {
	name      string
	cfg       diffusion.Config
	streamed  bool // through Decoder.Stream, at batch 1 only
	readbacks int  // Config.BlocksPerReadback: -blocks-per-readback's unless set
}

// decodeCases: both presets in fused mode under the two forced schedules, the quality
// preset in reference mode (a forward per step and per commit, 4-token windows) revealing
// all, the autoregressive baseline, and the fused quality preset revealing all streamed
// (at batch 1), its reads ramping up to -blocks-per-readback (default the presets') and
// after every block; those named by -decode.
func decodeCases() []decodeCase {
	var cases []decodeCase
	for _, preset := range []string{"quality", "speed"} {
		for _, schedule := range []diffusion.Schedule{diffusion.RevealAll, diffusion.RevealMin} {
			cfg, _ := diffusion.Preset(preset)
			cfg.Schedule = schedule
			bound := "upper bound"
			if schedule == diffusion.RevealMin {
				bound = "lower bound"
			}
			cases = append(cases, decodeCase{name: fmt.Sprintf("fused %s, %s (%s)", preset, schedule, bound), cfg: cfg})
		}
	}
	reference := diffusion.Quality
	reference.Mode, reference.Schedule = diffusion.Reference, diffusion.RevealAll
	cases = append(cases, decodeCase{name: "reference quality, reveal-all (upper bound)", cfg: reference})
	ar := diffusion.Quality
	ar.Mode = diffusion.Autoregressive
	cases = append(cases, decodeCase{name: "autoregressive", cfg: ar})
	streamed := diffusion.Quality
	streamed.Schedule = diffusion.RevealAll
	cases = append(cases, decodeCase{name: "fused quality, reveal-all, streamed", cfg: streamed, streamed: true},
		decodeCase{name: "fused quality, reveal-all, streamed block by block", cfg: streamed, streamed: true, readbacks: 1})
	var kept []decodeCase
	for _, c := range cases {
		if strings.Contains(c.name, *decodeOnly) {
			c.cfg.MaxNewTokens = *newTokens
			c.cfg.BlocksPerReadback = cmp.Or(c.readbacks, *readbackFlag, c.cfg.BlocksPerReadback)
			kept = append(kept, c)
		}
	}
	return kept
}

// benchDecode times whole generations: prompts of -context tokens, -new tokens each.
func benchDecode(m *model.Model) []row {
	var rows []row
	for _, field := range strings.Split(*batches, ",") {
		batch, err := strconv.Atoi(strings.TrimSpace(field))
		check(err)
		prompts := make([][]int, batch)
		for i := range prompts {
			prompts[i] = make([]int, *context_)
			for j := range prompts[i] {
				prompts[i][j] = (i*131 + j*7919) % (m.Config.VocabSize - 1)
			}
		}
		for _, c := range decodeCases() {
			if c.streamed && batch != 1 {
				continue
			}
			d, err := diffusion.New(m, c.cfg)
			check(err)
			var last []*diffusion.Result
			run := func() error {
				if !c.streamed {
					last, err = d.GenerateBatch(context.Background(), prompts)
					return err
				}
				for chunk, err := range d.Stream(context.Background(), prompts[0]) {
					if err != nil {
						return err
					}
					if chunk.Result != nil {
						last = []*diffusion.Result{chunk.Result}
					}
				}
				return nil
			}
			start := time.Now()
			if err := run(); err != nil { // warm-up, compiles
				log.Printf("%s, batch %d: %v", c.name, batch, err)
				continue
			}
			log.Printf("%s, batch %d: compiled and warmed up in %s", c.name, batch, time.Since(start).Round(time.Millisecond))
			var decode []time.Duration
			for range 3 {
				check(run())
				decode = append(decode, last[0].Stats.DecodeTime)
			}
			r := summarize(c.name, batch, decode, 1)
			s := last[0].Stats
			tokens := 0
			for _, res := range last {
				tokens += len(res.Tokens)
			}
			r.TokPerS = float64(tokens) / (r.Median / 1e3)
			r.PerStep = float64(s.Tokens) / float64(s.Forwards)
			r.Note = fmt.Sprintf("%d tokens/row, %d forwards/row, %.3f execs and %.3f readbacks per token, prefill %.1f ms",
				s.Tokens, s.Forwards, float64(s.Execs)/float64(s.Tokens), float64(s.Readbacks)/float64(s.Tokens),
				float64(s.PrefillTime.Microseconds())/1e3)
			rows = append(rows, r)
		}
	}
	return rows
}
