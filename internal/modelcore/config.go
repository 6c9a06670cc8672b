package modelcore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/blockdiff/blockdiff/internal/regularfile"
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

// rawConfig mirrors the fields of config.json this package reads.
type rawConfig struct {
	Architectures         []string         `json:"architectures"`
	VocabSize             *int             `json:"vocab_size"`
	HiddenSize            *int             `json:"hidden_size"`
	IntermediateSize      *int             `json:"intermediate_size"`
	NumHiddenLayers       *int             `json:"num_hidden_layers"`
	NumAttentionHeads     *int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int             `json:"num_key_value_heads"`
	HeadDim               *int             `json:"head_dim"`
	MaxPositionEmbeddings *int             `json:"max_position_embeddings"`
	RMSNormEps            *float64         `json:"rms_norm_eps"`
	RopeTheta             *float64         `json:"rope_theta"`
	RopeScaling           *json.RawMessage `json:"rope_scaling"`
	RopeParameters        *json.RawMessage `json:"rope_parameters"`
	TieWordEmbeddings     *bool            `json:"tie_word_embeddings"`
	HiddenAct             *string          `json:"hidden_act"`
	AttentionBias         *bool            `json:"attention_bias"`
	MLPBias               *bool            `json:"mlp_bias"`
	ScaleEmb              *float64         `json:"scale_emb"`
	ScaleDepth            *float64         `json:"scale_depth"`
	DimModelBase          *float64         `json:"dim_model_base"`
	BOSTokenID            *int             `json:"bos_token_id"`
	EOSTokenID            json.RawMessage  `json:"eos_token_id"`
	MaskTokenID           *int             `json:"mask_token_id"`
	PadTokenID            *int             `json:"pad_token_id"`
}

type rawRopeScaling struct {
	RopeTheta                     *float64  `json:"rope_theta"`
	Type                          string    `json:"type"`
	RopeType                      string    `json:"rope_type"`
	ShortFactor                   []float64 `json:"short_factor"`
	LongFactor                    []float64 `json:"long_factor"`
	OriginalMaxPositionEmbeddings *int      `json:"original_max_position_embeddings"`
	AttentionFactor               *float64  `json:"attention_factor"`
	Factor                        *float64  `json:"factor"`
}

// LoadConfig reads config.json from a checkpoint folder (or the file itself), which must
// be a regular file of at most [MaxConfigSize] bytes.
func LoadConfig(path string) (Config, error) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := regularfile.ReadFile(path, MaxConfigSize)
	if err != nil {
		return Config{}, fmt.Errorf("model: reading config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses the contents of a config.json and validates it (see
// [Config.Validate]); errors name the field.
func ParseConfig(data []byte) (Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("invalid config.json: %w", err)
	}
	if len(raw.Architectures) != 1 {
		return Config{}, fmt.Errorf("config.json must name exactly one architecture, got %q (supported: %s, %s)",
			raw.Architectures, ArchMiniCPM, ArchLlama)
	}
	cfg := Config{Architecture: raw.Architectures[0], RopeAttentionFactor: 1, MaskTokenID: -1}
	if cfg.Architecture != ArchMiniCPM && cfg.Architecture != ArchLlama {
		return Config{}, fmt.Errorf("unsupported architecture %q (supported: %s, %s)", cfg.Architecture, ArchMiniCPM, ArchLlama)
	}
	var missing []string
	required(&missing, "vocab_size", raw.VocabSize, &cfg.VocabSize)
	required(&missing, "hidden_size", raw.HiddenSize, &cfg.HiddenSize)
	required(&missing, "intermediate_size", raw.IntermediateSize, &cfg.IntermediateSize)
	required(&missing, "num_hidden_layers", raw.NumHiddenLayers, &cfg.NumLayers)
	required(&missing, "num_attention_heads", raw.NumAttentionHeads, &cfg.NumHeads)
	required(&missing, "max_position_embeddings", raw.MaxPositionEmbeddings, &cfg.MaxPositionEmbeddings)
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("config.json lacks required field(s) %q", missing)
	}
	cfg.NumKVHeads = cfg.NumHeads
	if raw.NumKeyValueHeads != nil {
		cfg.NumKVHeads = *raw.NumKeyValueHeads
	}
	if raw.HeadDim != nil {
		cfg.HeadDim = *raw.HeadDim
	} else if cfg.NumHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	}
	cfg.RMSNormEps = 1e-6
	if raw.RMSNormEps != nil {
		cfg.RMSNormEps = *raw.RMSNormEps
	}
	cfg.RopeTheta = 10000
	if raw.RopeTheta != nil {
		cfg.RopeTheta = *raw.RopeTheta
	}
	if raw.TieWordEmbeddings != nil {
		cfg.TieWordEmbeddings = *raw.TieWordEmbeddings
	} else {
		// transformers' PretrainedConfig defaults tie_word_embeddings to true.
		cfg.TieWordEmbeddings = true
	}
	if raw.HiddenAct != nil && *raw.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("unsupported hidden_act %q (supported: silu)", *raw.HiddenAct)
	}
	if (raw.AttentionBias != nil && *raw.AttentionBias) || (raw.MLPBias != nil && *raw.MLPBias) {
		return Config{}, errors.New("attention_bias and mlp_bias are not supported")
	}

	switch cfg.Architecture {
	case ArchMiniCPM:
		required(&missing, "scale_emb", raw.ScaleEmb, &cfg.ScaleEmb)
		required(&missing, "scale_depth", raw.ScaleDepth, &cfg.ScaleDepth)
		required(&missing, "dim_model_base", raw.DimModelBase, &cfg.DimModelBase)
		if len(missing) > 0 {
			return Config{}, fmt.Errorf("%s config.json lacks required field(s) %q", ArchMiniCPM, missing)
		}
	case ArchLlama:
		cfg.ScaleEmb, cfg.ScaleDepth, cfg.DimModelBase = 1, 0, float64(cfg.HiddenSize)
	}

	if raw.BOSTokenID != nil {
		cfg.BOSTokenID = *raw.BOSTokenID
	}
	eos, err := parseTokenIDs(raw.EOSTokenID)
	if err != nil {
		return Config{}, fmt.Errorf("eos_token_id: %w", err)
	}
	cfg.EOSTokenIDs = eos
	if raw.MaskTokenID != nil {
		cfg.MaskTokenID = *raw.MaskTokenID
		if cfg.MaskTokenID < 0 {
			return Config{}, fmt.Errorf("config: mask_token_id %d is negative", cfg.MaskTokenID)
		}
	}
	// transformers 5 writes rope_parameters (with rope_theta inside); earlier versions
	// rope_scaling beside a top-level rope_theta.
	for _, rope := range []*json.RawMessage{raw.RopeScaling, raw.RopeParameters} {
		if rope != nil && string(*rope) != "null" {
			if err := cfg.parseRopeScaling(*rope); err != nil {
				return Config{}, err
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	// pad_token_id is not used, but checked as the other ids are; -1 is an old way of
	// saying there is none.
	if p := raw.PadTokenID; p != nil && *p != -1 && (*p < 0 || *p >= cfg.VocabSize) {
		return Config{}, fmt.Errorf("config: pad_token_id %d is outside the vocabulary of %d", *p, cfg.VocabSize)
	}
	return cfg, nil
}

// required copies a required field, or adds its name to missing when absent.
func required[T int | float64](missing *[]string, name string, v, dst *T) {
	if v == nil {
		*missing = append(*missing, name)
		return
	}
	*dst = *v
}

// parseTokenIDs accepts an int, a list of ints, or nothing.
func parseTokenIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", raw)
	}
	return many, nil
}

// parseRopeScaling accepts longrope whose short and long factors are equal: then the
// frequencies do not depend on the sequence length and the rotation is exact at any
// position.
func (cfg *Config) parseRopeScaling(data []byte) error {
	const supported = `supported: none, or "longrope" with equal short_factor and long_factor`
	var rs rawRopeScaling
	if err := json.Unmarshal(data, &rs); err != nil {
		return fmt.Errorf("rope_scaling: %w (%s)", err, supported)
	}
	if rs.RopeTheta != nil {
		cfg.RopeTheta = *rs.RopeTheta
	}
	kind := rs.RopeType
	if kind == "" {
		kind = rs.Type
	}
	if kind == "default" || (kind == "" && rs.Factor == nil && rs.ShortFactor == nil && rs.LongFactor == nil) {
		return nil
	}
	if kind != "longrope" {
		return fmt.Errorf("unsupported rope_scaling type %q (%s)", kind, supported)
	}
	half := cfg.HeadDim / 2
	if len(rs.ShortFactor) != half || len(rs.LongFactor) != half {
		return fmt.Errorf("rope_scaling: longrope needs %d short and long factors (head_dim/2), got %d and %d",
			half, len(rs.ShortFactor), len(rs.LongFactor))
	}
	for i := range rs.ShortFactor {
		if rs.ShortFactor[i] != rs.LongFactor[i] {
			return fmt.Errorf("rope_scaling: longrope short_factor[%d]=%g differs from long_factor[%d]=%g (%s)",
				i, rs.ShortFactor[i], i, rs.LongFactor[i], supported)
		}
		if !(rs.ShortFactor[i] > 0) {
			return fmt.Errorf("rope_scaling: longrope factor[%d]=%g must be positive", i, rs.ShortFactor[i])
		}
	}
	cfg.RopeFactors = rs.ShortFactor
	// As in transformers and MiniCPM's own LongRoPE, cos and sin are multiplied by
	// sqrt(1 + ln(factor)/ln(original)), where factor = max_position_embeddings/original.
	cfg.RopeAttentionFactor = 1
	if rs.AttentionFactor != nil {
		cfg.RopeAttentionFactor = *rs.AttentionFactor
		return nil
	}
	original, factor := float64(cfg.MaxPositionEmbeddings), 1.0
	if rs.Factor != nil {
		factor = *rs.Factor
	}
	if rs.OriginalMaxPositionEmbeddings != nil && *rs.OriginalMaxPositionEmbeddings > 0 {
		original = float64(*rs.OriginalMaxPositionEmbeddings)
		factor = float64(cfg.MaxPositionEmbeddings) / original
	}
	if factor > 1 {
		cfg.RopeAttentionFactor = math.Sqrt(1 + math.Log(factor)/math.Log(original))
	}
	return nil
}

// Validate checks that the configuration is internally consistent and within the
// bounds ([MaxWidth] and the others): sizes positive, token ids in the vocabulary, and
// the real numbers finite, with rms_norm_eps above 0 and rope_theta above 1. Errors
// name the config.json field.
func (cfg Config) Validate() error {
	if cfg.Architecture != ArchMiniCPM && cfg.Architecture != ArchLlama {
		return fmt.Errorf("config: unsupported architecture %q (supported: %s, %s)", cfg.Architecture, ArchMiniCPM, ArchLlama)
	}
	for _, f := range []struct {
		name       string
		value, max int
	}{
		{"vocab_size", cfg.VocabSize, MaxVocabSize}, {"hidden_size", cfg.HiddenSize, MaxWidth},
		{"intermediate_size", cfg.IntermediateSize, MaxWidth}, {"num_hidden_layers", cfg.NumLayers, MaxLayers},
		{"num_attention_heads", cfg.NumHeads, MaxHeads}, {"num_key_value_heads", cfg.NumKVHeads, MaxHeads},
		{"head_dim", cfg.HeadDim, MaxWidth}, {"max_position_embeddings", cfg.MaxPositionEmbeddings, MaxPositions},
	} {
		if f.value <= 0 {
			return fmt.Errorf("config: %s must be positive, got %d", f.name, f.value)
		}
		if f.value > f.max {
			return fmt.Errorf("config: %s %d exceeds the limit of %d", f.name, f.value, f.max)
		}
	}
	if cfg.NumHeads%cfg.NumKVHeads != 0 {
		return fmt.Errorf("config: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)",
			cfg.NumHeads, cfg.NumKVHeads)
	}
	if cfg.HeadDim%2 != 0 {
		return fmt.Errorf("config: head_dim (%d) must be even for rotary embeddings", cfg.HeadDim)
	}
	if cfg.MaskTokenID < -1 || cfg.MaskTokenID >= cfg.VocabSize {
		return fmt.Errorf("config: mask_token_id %d is outside the vocabulary of %d", cfg.MaskTokenID, cfg.VocabSize)
	}
	if cfg.BOSTokenID < 0 || cfg.BOSTokenID >= cfg.VocabSize {
		return fmt.Errorf("config: bos_token_id %d is outside the vocabulary of %d", cfg.BOSTokenID, cfg.VocabSize)
	}
	for _, id := range cfg.EOSTokenIDs {
		if id < 0 || id >= cfg.VocabSize {
			return fmt.Errorf("config: eos_token_id %d is outside the vocabulary of %d", id, cfg.VocabSize)
		}
	}
	finite := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("config: %s must be finite, got %g", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name     string
		value    float64
		positive bool // else any finite value
	}{
		{"rms_norm_eps", cfg.RMSNormEps, true}, {"rope_theta", cfg.RopeTheta, true},
		{"rope_scaling attention factor", cfg.RopeAttentionFactor, true},
		{"scale_emb", cfg.ScaleEmb, false}, {"scale_depth", cfg.ScaleDepth, false}, {"dim_model_base", cfg.DimModelBase, false},
	} {
		if err := finite(f.name, f.value); err != nil {
			return err
		}
		if f.positive && f.value <= 0 {
			return fmt.Errorf("config: %s must be positive, got %g", f.name, f.value)
		}
	}
	if cfg.RopeTheta <= 1 {
		return fmt.Errorf("config: rope_theta must be above 1, got %g", cfg.RopeTheta)
	}
	if cfg.RopeFactors != nil {
		if len(cfg.RopeFactors) != cfg.HeadDim/2 {
			return fmt.Errorf("config: rope_scaling has %d factors, want head_dim/2 = %d", len(cfg.RopeFactors), cfg.HeadDim/2)
		}
		for i, f := range cfg.RopeFactors {
			// The inverse frequencies, at most 1, are divided by the factors: 1/f must be finite.
			if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || math.IsInf(1/f, 0) {
				return fmt.Errorf("config: rope_scaling factor[%d]=%g must be positive and finite, and so its inverse", i, f)
			}
		}
	}
	if cfg.Architecture == ArchMiniCPM && cfg.DimModelBase <= 0 {
		return fmt.Errorf("config: dim_model_base must be positive, got %g", cfg.DimModelBase)
	}
	return nil
}

// residualScale is the factor applied to each layer's attention and MLP outputs.
func (cfg Config) residualScale() float64 {
	if cfg.Architecture == ArchMiniCPM {
		return cfg.ScaleDepth / math.Sqrt(float64(cfg.NumLayers))
	}
	return 1
}

// logitScale is the factor applied to the final hidden state before the head.
func (cfg Config) logitScale() float64 {
	if cfg.Architecture == ArchMiniCPM {
		return cfg.DimModelBase / float64(cfg.HiddenSize)
	}
	return 1
}

// embedScale multiplies the token embeddings.
func (cfg Config) embedScale() float64 {
	if cfg.Architecture == ArchMiniCPM {
		return cfg.ScaleEmb
	}
	return 1
}

// ropeInvFreq returns the rotary inverse frequencies, one per pair of dimensions.
func (cfg Config) ropeInvFreq() []float64 {
	half := cfg.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(cfg.HeadDim))
		if cfg.RopeFactors != nil {
			inv[i] /= cfg.RopeFactors[i]
		}
	}
	return inv
}
