package diffusion

import "time"

// Finish says why a generation ended.
type Finish string

// Finish reasons.
const (
	// FinishStop: a stop token was generated (it is not part of the output).
	FinishStop Finish = "stop"
	// FinishLength: MaxNewTokens tokens were generated.
	FinishLength Finish = "length"
)

// Result is one prompt's generation.
type Result struct {
	// Tokens generated, up to (not including) the first stop token, at most MaxNewTokens.
	Tokens []int
	Finish Finish
	Stats  Stats
	// Steps lists every denoise step when Config.Trace is set.
	Steps []Step
}

// Step is one denoise step: the block it ran on and the positions it revealed, in
// increasing order, with their tokens.
type Step struct {
	BlockStart int
	Revealed   [][2]int // [position, token]
}

// Stats describes how a generation ran. Counts are per prompt; Execs, Readbacks and
// the times are shared by the prompts of a batch.
type Stats struct {
	// Forwards counts forward passes (the prefill included), DenoiseSteps the steps
	// that revealed tokens, Commits the blocks written to the cache, and Remasks the
	// blocks restarted because their anchor guess was wrong (fused mode).
	Forwards, DenoiseSteps, Commits, Remasks int
	// Tokens generated (the output's length).
	Tokens int
	// TokensPerForward is Tokens / Forwards.
	TokensPerForward float64
	// Execs counts program executions on the device and Readbacks the reads of state
	// to the host.
	Execs, Readbacks int
	// PrefillTime covers the prompt's prefill, DecodeTime the rest (compilation
	// excluded).
	PrefillTime, DecodeTime time.Duration
	Finish                  Finish
}

// TokensPerSecond is the decoding speed: tokens over decode time.
func (s Stats) TokensPerSecond() float64 {
	if s.DecodeTime <= 0 {
		return 0
	}
	return float64(s.Tokens) / s.DecodeTime.Seconds()
}
