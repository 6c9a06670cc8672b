package quant

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/blockdiff/blockdiff/model"
)

// Identifiers written in calibration files.
const (
	// CalibrationFormat is the "format" of the calibration files this package writes and reads.
	CalibrationFormat = "blockdiff-calibration/v1"
	// CalibrationDType is the "dtype" the scales are meant for.
	CalibrationDType = "float8_e4m3fn"
)

// Calibration holds the largest input magnitude seen by each linear layer over a set of
// token sequences: the content of a calibration.json file (see the package
// documentation for its format).
type Calibration struct {
	// Format is [CalibrationFormat] and DType [CalibrationDType].
	Format string `json:"format"`
	DType  string `json:"dtype"`
	// BlockSize is the attention block size of the calibration passes.
	BlockSize int `json:"block_size"`
	// Sequences and Tokens count what was run.
	Sequences int `json:"sequences"`
	Tokens    int `json:"tokens"`
	// Layers maps a linear layer's name (e.g. "model.layers.0.self_attn.qkv_proj",
	// "lm_head") to its statistics.
	Layers map[string]LayerStats `json:"layers"`
}

// LayerStats are the calibration statistics of one linear layer.
type LayerStats struct {
	// InputAmax is the largest |x| over every element of the layer's input.
	InputAmax float64 `json:"input_amax"`
}

// InputScale returns a layer's static FP8 input scale, [ScaleFromAmax] of its
// input_amax, or an error when the calibration does not cover the layer.
func (c *Calibration) InputScale(layer string) (float32, error) {
	stats, ok := c.Layers[layer]
	if !ok {
		return 0, fmt.Errorf("quant: the calibration has no layer %q (it covers %d layers)", layer, len(c.Layers))
	}
	return ScaleFromAmax(float32(stats.InputAmax)), nil
}

// Validate checks the identifiers and that every amax is finite and non-negative.
func (c *Calibration) Validate() error {
	var errs []error
	if c.Format != CalibrationFormat {
		errs = append(errs, fmt.Errorf("format %q is not %q", c.Format, CalibrationFormat))
	}
	if c.DType != CalibrationDType {
		errs = append(errs, fmt.Errorf("dtype %q is not supported (supported: %q)", c.DType, CalibrationDType))
	}
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("block_size must be at least 1, got %d", c.BlockSize))
	}
	if c.Sequences < 0 || c.Tokens < 0 {
		errs = append(errs, fmt.Errorf("sequences (%d) and tokens (%d) must not be negative", c.Sequences, c.Tokens))
	}
	if len(c.Layers) == 0 {
		errs = append(errs, errors.New("no layers"))
	}
	for _, name := range c.LayerNames() {
		amax := c.Layers[name].InputAmax
		if !(amax >= 0) || amax > math.MaxFloat32 {
			errs = append(errs, fmt.Errorf("layer %q: input_amax must be finite and non-negative, got %g", name, amax))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("quant: invalid calibration: %w", err)
	}
	return nil
}

// LayerNames returns the names of the calibrated layers, sorted.
func (c *Calibration) LayerNames() []string {
	names := make([]string, 0, len(c.Layers))
	for name := range c.Layers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Check verifies that the calibration fits a model configuration: every layer it names
// exists (an unknown name is an error, usually a calibration of another model), and it
// covers every layer that will be quantized: all of them, lm_head only when
// quantizeHead.
func (c *Calibration) Check(cfg model.Config, quantizeHead bool) error {
	known := LayerNames(cfg)
	var unknown, missing []string
	for _, name := range c.LayerNames() {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	for _, name := range known {
		if _, ok := c.Layers[name]; !ok && (name != HeadName || quantizeHead) {
			missing = append(missing, name)
		}
	}
	var errs []error
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("it names layers the model does not have: %q", unknown))
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("it lacks layers to quantize: %q", missing))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("quant: calibration does not fit the model (%d layers): %w", cfg.NumLayers, err)
	}
	return nil
}

// LayerNames lists the linear layers of a model configuration, in forward order, as
// the model names them: per decoder layer i "model.layers.{i}.self_attn.qkv_proj",
// "….self_attn.o_proj", "….mlp.gate_up_proj", "….mlp.down_proj", then "lm_head".
func LayerNames(cfg model.Config) []string {
	layouts := linearLayouts(cfg)
	names := make([]string, len(layouts))
	for i, l := range layouts {
		names[i] = l.name
	}
	return names
}

// ReadCalibration reads and validates a calibration file.
func ReadCalibration(path string) (*Calibration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("quant: reading calibration: %w", err)
	}
	c, err := ParseCalibration(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// ParseCalibration parses and validates the contents of a calibration file.
func ParseCalibration(data []byte) (*Calibration, error) {
	var c Calibration
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("quant: invalid calibration JSON: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Marshal returns the calibration as indented JSON, layers sorted by name.
func (c *Calibration) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("quant: encoding calibration: %w", err)
	}
	return append(data, '\n'), nil
}

// WriteFile validates the calibration and writes it to path.
func (c *Calibration) WriteFile(path string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	data, err := c.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("quant: writing calibration: %w", err)
	}
	return nil
}
