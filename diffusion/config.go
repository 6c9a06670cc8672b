package diffusion

import (
	"errors"
	"fmt"
	"math"

	"github.com/blockdiff/blockdiff/internal/sharding"
	"github.com/blockdiff/blockdiff/model"
)

// Bounds on a configuration.
const (
	// MaxBlockSize is the largest block size. A block takes up to BlockSize+1 forwards
	// of up to twice its positions, so its cost grows as its square: published
	// block-diffusion checkpoints use blocks of 4 to 32.
	MaxBlockSize = 128
	// MaxBlocksPerReadback bounds BlocksPerReadback, which sizes the device loop's
	// record of its iterations.
	MaxBlocksPerReadback = 1024
)

// Mode selects how blocks are decoded.
type Mode int

const (
	// Fused shares each block's commit with the next block's first denoise step. It is
	// the default and gives the same tokens as Reference with fewer forward passes.
	Fused Mode = iota
	// Reference runs one forward per denoise step and one per commit, as the spec
	// describes them.
	Reference
	// Autoregressive decodes one token per forward with causal attention (block size
	// 1); it is the baseline speed figures are compared with.
	Autoregressive
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Fused:
		return "fused"
	case Reference:
		return "reference"
	case Autoregressive:
		return "autoregressive"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a mode name as printed by [Mode.String].
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Fused, Reference, Autoregressive} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("diffusion: unknown mode %q (want fused, reference or autoregressive)", s)
}

// Config controls decoding. The zero value is not valid: start from [DefaultConfig]
// or a preset.
type Config struct {
	// BlockSize is the number of positions per block (default 4, at most
	// [MaxBlockSize]). Autoregressive mode decodes blocks of 1 whatever is set here,
	// and counts BlockSize of its tokens as a block of BlocksPerReadback.
	BlockSize int
	// Threshold τ: a masked position is revealed when its confidence is strictly
	// greater (default 0.9).
	Threshold float64
	// MinReveal is the least number of positions revealed per denoise step (default 1).
	MinReveal int
	// MaxNewTokens is the most tokens generated (default 256).
	MaxNewTokens int
	// Mode is the decoding mode (default Fused).
	Mode Mode
	// Temperature 0 decodes greedily; above 0 candidates are sampled (default 0).
	Temperature float64
	// TopK keeps the K most likely tokens when sampling (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability reaches P
	// when sampling (0 or 1: all).
	TopP float64
	// Seed makes sampling reproducible: the same seed, prompt and configuration give the
	// same tokens, alone or in a batch.
	Seed int64
	// StopTokens end generation in addition to the checkpoint's EOS tokens, which always
	// do.
	StopTokens []int
	// BlocksPerReadback is the most blocks the device decodes between host reads
	// (default 64). Each read costs a round trip (about 2 ms on an H200, more than a
	// denoise step), so a whole generation reads every BlocksPerReadback blocks, while
	// a stream reads after its first block, so that text comes at once, and then after
	// twice as many blocks as the read before, up to BlocksPerReadback. 1 reads after
	// every block. Autoregressive mode, whose blocks are single tokens, reads after as
	// many tokens as the other modes: every BlocksPerReadback × BlockSize tokens. A
	// cancelled context is seen at the next read, so fewer blocks answer it sooner: on
	// an H200, 64 blocks take 0.14–0.42 s at batch 1 and 0.45–1.35 s at batch 64,
	// depending on how many masks each step reveals (64 decoded faster than 16).
	BlocksPerReadback int
	// Trace records every denoise step (positions and tokens revealed) in the result.
	Trace bool
	// Schedule forces how denoise steps reveal, for benchmarks (default Natural).
	Schedule Schedule
	// Devices decodes tensor-parallel over the backend's first Devices devices (0 or 1:
	// on one, the default): each holds its share of every layer's attention heads and
	// FFN columns and of the KV cache, and XLA's partitioner spreads every program over
	// them. It needs a backend that addresses them (go-xla's: backend.ForDevices), dense
	// layers, and head counts and an FFN that divide over them (MiniCPM5-2B: 2, 4 or 8).
	Devices int
}

// Schedule says how denoise steps choose the positions they reveal.
type Schedule int

const (
	// Natural follows the spec: positions above the threshold, at least MinReveal.
	Natural Schedule = iota
	// RevealAll reveals every masked position at once and accepts every anchor guess:
	// the upper bound of tokens per forward. For benchmarks with random weights, whose
	// confidences mean nothing; the tokens are not the model's decoding.
	RevealAll
	// RevealMin reveals exactly MinReveal positions per step and accepts every anchor
	// guess: the lower bound, for the same benchmarks.
	RevealMin
)

// String names the schedule.
func (s Schedule) String() string {
	switch s {
	case Natural:
		return "natural"
	case RevealAll:
		return "reveal-all"
	case RevealMin:
		return "reveal-min"
	}
	return fmt.Sprintf("Schedule(%d)", int(s))
}

// Presets of the PyTorch engine blockdiff replaces.
var (
	// Quality reveals positions above 0.9 confidence, at least one per step.
	Quality = Config{BlockSize: 4, Threshold: 0.9, MinReveal: 1, MaxNewTokens: 256, BlocksPerReadback: 64}
	// Speed reveals positions above 0.7 confidence, at least two per step.
	Speed = Config{BlockSize: 4, Threshold: 0.7, MinReveal: 2, MaxNewTokens: 256, BlocksPerReadback: 64}
)

// DefaultConfig is the Quality preset in fused mode, greedy.
func DefaultConfig() Config { return Quality }

// Preset returns a preset by name: "quality" or "speed".
func Preset(name string) (Config, error) {
	switch name {
	case "quality":
		return Quality, nil
	case "speed":
		return Speed, nil
	}
	return Config{}, fmt.Errorf("diffusion: unknown preset %q (want quality or speed)", name)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize < 1 || c.BlockSize > MaxBlockSize {
		errs = append(errs, fmt.Errorf("block size must be at least 1 and at most %d, got %d", MaxBlockSize, c.BlockSize))
	}
	if c.Mode == Fused && c.BlockSize == 1 {
		errs = append(errs, errors.New("fused mode needs a block size above 1 (use autoregressive mode)"))
	}
	if c.Mode < Fused || c.Mode > Autoregressive {
		errs = append(errs, fmt.Errorf("unknown mode %d", c.Mode))
	}
	if math.IsNaN(c.Threshold) || c.Threshold < 0 || c.Threshold > 1 {
		errs = append(errs, fmt.Errorf("threshold must be in [0, 1], got %g", c.Threshold))
	}
	if c.MinReveal < 1 || c.MinReveal > MaxBlockSize {
		errs = append(errs, fmt.Errorf("minimum reveals per step must be at least 1 and at most %d, got %d", MaxBlockSize, c.MinReveal))
	}
	if c.MaxNewTokens < 1 || c.MaxNewTokens > model.MaxPositions {
		errs = append(errs, fmt.Errorf("max new tokens must be at least 1 and at most %d (model.MaxPositions), got %d", model.MaxPositions, c.MaxNewTokens))
	}
	if math.IsNaN(c.Temperature) || c.Temperature < 0 {
		errs = append(errs, fmt.Errorf("temperature must be non-negative, got %g", c.Temperature))
	}
	if c.TopK < 0 || c.TopK > model.MaxVocabSize {
		errs = append(errs, fmt.Errorf("top-k must be non-negative and at most %d, got %d", model.MaxVocabSize, c.TopK))
	}
	if math.IsNaN(c.TopP) || c.TopP < 0 || c.TopP > 1 {
		errs = append(errs, fmt.Errorf("top-p must be in [0, 1], got %g", c.TopP))
	}
	if c.Schedule < Natural || c.Schedule > RevealMin {
		errs = append(errs, fmt.Errorf("unknown schedule %d", c.Schedule))
	}
	if c.BlocksPerReadback < 1 || c.BlocksPerReadback > MaxBlocksPerReadback {
		errs = append(errs, fmt.Errorf("blocks per readback must be at least 1 and at most %d, got %d", MaxBlocksPerReadback, c.BlocksPerReadback))
	}
	if c.Devices < 0 || c.Devices > sharding.MaxDevices {
		errs = append(errs, fmt.Errorf("devices must be at least 0 and at most %d, got %d", sharding.MaxDevices, c.Devices))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("diffusion: invalid config: %w", err)
	}
	return nil
}

// blockSize is the block size the mode decodes with.
func (c Config) blockSize() int {
	if c.Mode == Autoregressive {
		return 1
	}
	return c.BlockSize
}

// readbackBlocks is the most blocks of the mode (blockSize) decoded between host
// reads: BlocksPerReadback, times BlockSize in Autoregressive mode, so that its reads,
// each of which costs a round trip, come after as many tokens as the other modes'.
func (c Config) readbackBlocks() int {
	if c.Mode == Autoregressive {
		return c.BlocksPerReadback * c.BlockSize
	}
	return c.BlocksPerReadback
}

// sampling reports whether candidates are sampled rather than taken greedily.
func (c Config) sampling() bool { return c.Temperature > 0 }
