package quant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/blockdiff/blockdiff/internal/regularfile"
	"github.com/blockdiff/blockdiff/model"
)

// Names of the compressed-tensors format this package reads and writes.
const (
	// QuantMethod is quantization_config.quant_method.
	QuantMethod = "compressed-tensors"
	// FormatFloatQuantized is the format of FP8 weights stored as F8_E4M3 with scales.
	FormatFloatQuantized = "float-quantized"
	// StatusCompressed is quantization_status for weights stored quantized.
	StatusCompressed = "compressed"
)

// QuantizationConfig is the quantization_config of a compressed-tensors checkpoint's
// config.json, as far as this package reads it. Fields this package ignores (such as
// version or provider) are dropped.
type QuantizationConfig struct {
	// QuantMethod must be [QuantMethod], Format [FormatFloatQuantized], and
	// QuantizationStatus [StatusCompressed] or empty.
	QuantMethod        string `json:"quant_method"`
	Format             string `json:"format"`
	QuantizationStatus string `json:"quantization_status,omitempty"`
	// ConfigGroups map a group name (e.g. "group_0") to the modules it targets and how
	// they are quantized.
	ConfigGroups map[string]ConfigGroup `json:"config_groups"`
	// Ignore lists modules left unquantized: names, or "re:" regular expressions.
	Ignore []string `json:"ignore"`
	// KVCacheScheme, SparsityConfig and TransformConfig must be null or absent.
	KVCacheScheme   json.RawMessage `json:"kv_cache_scheme"`
	SparsityConfig  json.RawMessage `json:"sparsity_config,omitempty"`
	TransformConfig json.RawMessage `json:"transform_config,omitempty"`
	// GlobalCompressionRatio is informative.
	GlobalCompressionRatio *float64 `json:"global_compression_ratio"`
}

// ConfigGroup is one entry of config_groups.
type ConfigGroup struct {
	// Targets name the modules the group quantizes: a module class ("Linear": every
	// linear layer, which is every module this package quantizes), names, or "re:"
	// regular expressions.
	Targets []string `json:"targets"`
	// Weights is required; InputActivations is nil for weight-only quantization;
	// OutputActivations must be nil.
	Weights           *QuantizationArgs `json:"weights"`
	InputActivations  *QuantizationArgs `json:"input_activations"`
	OutputActivations *QuantizationArgs `json:"output_activations"`
	// Format, when set, overrides the top-level format for this group.
	Format string `json:"format,omitempty"`
}

// QuantizationArgs describe how a weight or activation is quantized. Missing fields take
// compressed-tensors' defaults: 8 bits, type "int" (so FP8 must say "float"),
// symmetric, static, strategy "tensor" when group_size is unset.
type QuantizationArgs struct {
	// NumBits must be 8 (nil: the default, 8).
	NumBits *int `json:"num_bits"`
	// Type must be "float".
	Type string `json:"type"`
	// Symmetric must be true (nil: the default, true).
	Symmetric *bool `json:"symmetric"`
	// Strategy is "tensor" or "channel" for weights, "tensor" for input activations
	// (empty: "tensor").
	Strategy Strategy `json:"strategy"`
	// GroupSize, BlockStructure and Actorder must be null: no group or block
	// quantization.
	GroupSize      *int            `json:"group_size"`
	BlockStructure json.RawMessage `json:"block_structure"`
	Actorder       json.RawMessage `json:"actorder"`
	// Dynamic must be false: scales are static, stored in the checkpoint.
	Dynamic DynamicMode `json:"dynamic"`
	// Observer names how the scales were measured (informative).
	Observer string `json:"observer,omitempty"`
}

// DynamicMode is quantization arguments' "dynamic" field: false (static scales stored in
// the checkpoint), true (computed at run time) or "local".
type DynamicMode int

// The values of "dynamic".
const (
	DynamicFalse DynamicMode = iota // false
	DynamicTrue                     // true
	DynamicLocal                    // "local"
)

// MarshalJSON writes false, true or "local".
func (d DynamicMode) MarshalJSON() ([]byte, error) {
	switch d {
	case DynamicFalse:
		return []byte("false"), nil
	case DynamicTrue:
		return []byte("true"), nil
	case DynamicLocal:
		return []byte(`"local"`), nil
	}
	return nil, fmt.Errorf("quant: invalid DynamicMode %d", int(d))
}

// UnmarshalJSON reads false, true, "local" or null (false).
func (d *DynamicMode) UnmarshalJSON(data []byte) error {
	switch string(bytes.TrimSpace(data)) {
	case "false", "null":
		*d = DynamicFalse
	case "true":
		*d = DynamicTrue
	case `"local"`:
		*d = DynamicLocal
	default:
		return fmt.Errorf(`"dynamic" must be true, false or "local", got %s`, data)
	}
	return nil
}

// ParseQuantizationConfig reads the quantization_config of a config.json's contents. It
// returns nil, nil when there is none (or it is null), and an error naming the field
// when there is one this package does not support; see [QuantizationConfig.Validate].
func ParseQuantizationConfig(configJSON []byte) (*QuantizationConfig, error) {
	var raw struct {
		QuantizationConfig json.RawMessage `json:"quantization_config"`
	}
	if err := json.Unmarshal(configJSON, &raw); err != nil {
		return nil, fmt.Errorf("quant: invalid config.json: %w", err)
	}
	if len(raw.QuantizationConfig) == 0 || string(raw.QuantizationConfig) == "null" {
		return nil, nil
	}
	var qc QuantizationConfig
	if err := json.Unmarshal(raw.QuantizationConfig, &qc); err != nil {
		return nil, fmt.Errorf("quant: invalid quantization_config: %w", err)
	}
	if err := qc.Validate(); err != nil {
		return nil, err
	}
	return &qc, nil
}

// ReadQuantizationConfig reads the quantization_config of a checkpoint folder's
// config.json (or of the file itself); nil, nil when it has none.
func ReadQuantizationConfig(path string) (*QuantizationConfig, error) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := regularfile.ReadFile(path, model.MaxConfigSize) // not a pipe, nor huge
	if err != nil {
		return nil, fmt.Errorf("quant: reading config: %w", err)
	}
	qc, err := ParseQuantizationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return qc, nil
}

// IsFP8Checkpoint reports whether a checkpoint folder's config.json has a
// compressed-tensors FP8 quantization_config this package loads. It returns false, nil
// when there is no quantization_config, and an error when config.json cannot be read or
// its quantization_config is not supported.
func IsFP8Checkpoint(dir string) (bool, error) {
	qc, err := ReadQuantizationConfig(dir)
	return qc != nil, err
}

// Validate checks that the configuration describes FP8 E4M3 weights (per tensor or per
// channel, static) with optional static per-tensor FP8 input activations, stored
// compressed. Anything else is an error naming what is unsupported.
func (qc *QuantizationConfig) Validate() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if qc.QuantMethod != QuantMethod {
		fail("quant_method %q is not supported (supported: %q)", qc.QuantMethod, QuantMethod)
	}
	if qc.Format != FormatFloatQuantized {
		fail("format %q is not supported (supported: %q)", qc.Format, FormatFloatQuantized)
	}
	if qc.QuantizationStatus != "" && qc.QuantizationStatus != StatusCompressed {
		fail("quantization_status %q is not supported (supported: %q)", qc.QuantizationStatus, StatusCompressed)
	}
	for _, f := range []struct {
		name  string
		value json.RawMessage
	}{{"kv_cache_scheme", qc.KVCacheScheme}, {"sparsity_config", qc.SparsityConfig}, {"transform_config", qc.TransformConfig}} {
		if len(f.value) > 0 && string(f.value) != "null" {
			fail("%s is not supported (it must be null)", f.name)
		}
	}
	if len(qc.ConfigGroups) == 0 {
		fail("config_groups is empty")
	}
	for _, name := range qc.groupNames() {
		if err := qc.ConfigGroups[name].validate(); err != nil {
			fail("config_groups.%s: %w", name, err)
		}
	}
	for _, pattern := range qc.Ignore {
		if _, err := compileTarget(pattern); err != nil {
			fail("ignore: %w", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("quant: unsupported quantization_config: %w", err)
	}
	return nil
}

// validate checks one config group.
func (g ConfigGroup) validate() error {
	if len(g.Targets) == 0 {
		return errors.New("targets is empty")
	}
	for _, t := range g.Targets {
		if _, err := compileTarget(t); err != nil {
			return fmt.Errorf("targets: %w", err)
		}
	}
	if g.Format != "" && g.Format != FormatFloatQuantized {
		return fmt.Errorf("format %q is not supported (supported: %q)", g.Format, FormatFloatQuantized)
	}
	if g.Weights == nil {
		return errors.New("weights must be quantized (weights is null)")
	}
	if err := g.Weights.validate(StrategyTensor, StrategyChannel); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	if g.InputActivations != nil {
		if err := g.InputActivations.validate(StrategyTensor); err != nil {
			return fmt.Errorf("input_activations: %w", err)
		}
	}
	if g.OutputActivations != nil {
		return errors.New("output_activations are not supported (must be null)")
	}
	return nil
}

// validate checks FP8 E4M3 arguments: 8-bit float, symmetric, static, one of strategies.
func (a *QuantizationArgs) validate(strategies ...Strategy) error {
	if a.NumBits != nil && *a.NumBits != 8 {
		return fmt.Errorf("num_bits %d is not supported (supported: 8)", *a.NumBits)
	}
	if a.Type != "float" {
		return fmt.Errorf("type %q is not supported (supported: \"float\", i.e. FP8 E4M3)", a.Type)
	}
	if a.Symmetric != nil && !*a.Symmetric {
		return errors.New("asymmetric quantization is not supported (symmetric must be true)")
	}
	if a.Dynamic != DynamicFalse {
		return errors.New("dynamic quantization is not supported (dynamic must be false: static scales)")
	}
	if a.GroupSize != nil {
		return fmt.Errorf("group_size %d is not supported (group quantization)", *a.GroupSize)
	}
	if len(a.BlockStructure) > 0 && string(a.BlockStructure) != "null" {
		return fmt.Errorf("block_structure %s is not supported (block quantization)", a.BlockStructure)
	}
	if a.Strategy != "" && !slices.Contains(strategies, a.Strategy) {
		return fmt.Errorf("strategy %q is not supported (supported: %q)", string(a.Strategy), strategies)
	}
	return nil
}

// strategy is the effective strategy of validated arguments.
func (a *QuantizationArgs) strategy() Strategy {
	if a.Strategy == "" {
		return StrategyTensor
	}
	return a.Strategy
}

// groupNames returns the group names, sorted, for deterministic matching and messages.
func (qc *QuantizationConfig) groupNames() []string {
	names := make([]string, 0, len(qc.ConfigGroups))
	for name := range qc.ConfigGroups {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Scheme returns the config group that quantizes a linear module (a checkpoint module
// name such as "model.layers.0.self_attn.q_proj"), or nil when the module is ignored or
// no group targets it. A target matches when it is "Linear", the module's name, or a
// "re:" regular expression that matches the name from its start (Python's re.match).
// When several groups target a module, the first by name wins.
func (qc *QuantizationConfig) Scheme(module string) *ConfigGroup {
	if matchesAny(qc.Ignore, module) {
		return nil
	}
	for _, name := range qc.groupNames() {
		g := qc.ConfigGroups[name]
		if matchesAny(g.Targets, module) {
			return &g
		}
	}
	return nil
}

// matchesAny reports whether one of the targets matches the module.
func matchesAny(targets []string, module string) bool {
	for _, t := range targets {
		if t == "Linear" || t == module {
			return true
		}
		if re, err := compileTarget(t); err == nil && re != nil && re.MatchString(module) {
			return true
		}
	}
	return false
}

// compileTarget compiles a "re:" target anchored at its start; nil for other targets.
func compileTarget(target string) (*regexp.Regexp, error) {
	pattern, ok := strings.CutPrefix(target, "re:")
	if !ok {
		return nil, nil
	}
	re, err := regexp.Compile("^(?:" + pattern + ")")
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", target, err)
	}
	return re, nil
}
