package model

import (
	"slices"

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// Architectures this package implements.
const (
	ArchMiniCPM = "MiniCPMForCausalLM"
	ArchLlama   = "LlamaForCausalLM"
)

// Config describes a checkpoint, read from its config.json.
type Config struct {
	Architecture          string
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumLayers             int
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	// RopeFactors are the per-frequency divisors of longrope scaling (nil without scaling).
	RopeFactors []float64
	// RopeAttentionFactor multiplies cos and sin under longrope scaling (1 without).
	RopeAttentionFactor float64
	TieWordEmbeddings   bool

	// MiniCPM scalars; for Llama they are neutral (ScaleEmb 1, no depth scaling,
	// DimModelBase = HiddenSize).
	ScaleEmb     float64
	ScaleDepth   float64
	DimModelBase float64

	BOSTokenID  int
	EOSTokenIDs []int
	// MaskTokenID is the token that marks a masked position (-1 when absent).
	MaskTokenID int
}

// MiniCPM5_2B is the shape of MiniCPM5-2B diffusion checkpoints, for benchmarks with
// random weights.
var MiniCPM5_2B = Config{
	Architecture:          ArchLlama,
	VocabSize:             130560,
	HiddenSize:            2048,
	IntermediateSize:      6144,
	NumLayers:             42,
	NumHeads:              16,
	NumKVHeads:            2,
	HeadDim:               128,
	MaxPositionEmbeddings: 32768,
	RMSNormEps:            1e-6,
	RopeTheta:             5e6,
	RopeAttentionFactor:   1,
	ScaleEmb:              1,
	ScaleDepth:            0,
	DimModelBase:          2048,
	BOSTokenID:            1,
	EOSTokenIDs:           []int{2},
	MaskTokenID:           130559,
}

// Bounds on the numbers of a configuration, far above those of any published checkpoint
// (a hidden size of 16384, 256k tokens, 128 layers and heads): sizes derived from two of
// them cannot overflow, and a config.json cannot ask for absurd ones. A checkpoint's
// tensor shapes must then confirm them before anything is sized from them.
const (
	// MaxWidth bounds hidden_size, intermediate_size and head_dim.
	MaxWidth = 1 << 20
	// MaxVocabSize bounds vocab_size.
	MaxVocabSize = 1 << 24
	// MaxLayers bounds num_hidden_layers.
	MaxLayers = 1 << 12
	// MaxHeads bounds num_attention_heads (and so num_key_value_heads).
	MaxHeads = 1 << 12
	// MaxPositions bounds max_position_embeddings: positions are float32 in the rotary
	// angles, exact up to 2^24.
	MaxPositions = 1 << 24
	// MaxConfigSize is the largest config.json read, in bytes (real ones hold a few KB).
	MaxConfigSize = 1 << 20
)

// LoadConfig reads config.json from a checkpoint folder (or the file itself), which must
// be a regular file of at most [MaxConfigSize] bytes.
func LoadConfig(path string) (Config, error) {
	cfg, err := modelcore.LoadConfig(path)
	return publicConfig(cfg), err
}

// ParseConfig parses the contents of a config.json and validates it (see
// [Config.Validate]); errors name the field.
func ParseConfig(data []byte) (Config, error) {
	cfg, err := modelcore.ParseConfig(data)
	return publicConfig(cfg), err
}

// Validate checks that the configuration is internally consistent and within the
// bounds ([MaxWidth] and the others): sizes positive, token ids in the vocabulary, and
// the real numbers finite, with rms_norm_eps above 0 and rope_theta above 1. Errors
// name the config.json field.
func (cfg Config) Validate() error { return cfg.core().Validate() }

// JSON returns the configuration as a transformers config.json that [ParseConfig] reads
// back to cfg: LlamaForCausalLM (model_type "llama") or MiniCPMForCausalLM with its
// scalars; longrope factors, when set, as rope_scaling with an explicit
// attention_factor.
func (cfg Config) JSON() ([]byte, error) { return cfg.core().JSON() }

// core is cfg as package modelcore's twin of Config: the same fields, so that the
// conversion is a copy the compiler checks. Slices are cloned: neither shares memory.
func (cfg Config) core() modelcore.Config {
	c := modelcore.Config(cfg)
	c.RopeFactors, c.EOSTokenIDs = slices.Clone(c.RopeFactors), slices.Clone(c.EOSTokenIDs)
	return c
}

// publicConfig is the inverse of [Config.core].
func publicConfig(c modelcore.Config) Config {
	cfg := Config(c)
	cfg.RopeFactors, cfg.EOSTokenIDs = slices.Clone(cfg.RopeFactors), slices.Clone(cfg.EOSTokenIDs)
	return cfg
}
