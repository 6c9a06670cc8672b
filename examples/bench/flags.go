package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
)

// checkFlags refuses flags out of range, naming them, before anything is built.
func checkFlags() error {
	var errs []error
	inRange := func(name string, value, least, most int) {
		if value < least || value > most {
			errs = append(errs, fmt.Errorf("-%s %d: want %d to %d", name, value, least, most))
		}
	}
	inRange("layers", *layers, 0, model.MaxLayers)
	inRange("context", *context_, 1, model.MaxPositions-1)
	inRange("capacity", *capacity, 1, model.MaxPositions)
	inRange("iters", *iters, 1, 1<<20)
	inRange("added-steps", *added, 0, 1<<10)
	inRange("new", *newTokens, 1, model.MaxPositions)
	inRange("blocks-per-readback", *readbackFlag, 0, diffusion.MaxBlocksPerReadback)
	inRange("prefill-capacity", *prefillCap, 0, model.MaxPositions)
	inRange("added-prefills", *addedPrefill, 0, 1<<10)
	if *context_ >= *capacity {
		errs = append(errs, fmt.Errorf("-context %d: the step timings need room for a window past it in -capacity %d", *context_, *capacity))
	}
	lists := []struct {
		name, value string
		most        int
	}{{"batches", *batches, 1 << 16}, {"prefill-tokens", *prefillToks, model.MaxPositions}}
	for _, l := range lists {
		for field := range strings.SplitSeq(l.value, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(field))
			if err != nil || n < 1 || n > l.most {
				errs = append(errs, fmt.Errorf("-%s: %q is not a number from 1 to %d", l.name, field, l.most))
			}
		}
	}
	for kind := range strings.SplitSeq(*steps, ",") {
		if !slices.ContainsFunc(stepKinds, func(k stepKind) bool { return k.short == kind }) {
			errs = append(errs, fmt.Errorf("-steps: unknown step kind %q (want denoise, fused, ar or ar-padded)", kind))
		}
	}
	for part := range strings.SplitSeq(*only, ",") {
		if part != "steps" && part != "prefill" && part != "decode" {
			errs = append(errs, fmt.Errorf("-only: unknown section %q (want steps, prefill or decode)", part))
		}
	}
	if *loopExit != "count" && *loopExit != "data" {
		errs = append(errs, fmt.Errorf("-loop-exit %q: want count or data", *loopExit))
	}
	if *prefillFree && !*prefillFresh {
		errs = append(errs, errors.New("-prefill-free frees the inputs -prefill-fresh replaces: give both"))
	}
	return errors.Join(errs...)
}
