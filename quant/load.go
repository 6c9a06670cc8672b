package quant

import (
	"fmt"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/model"
)

// Load loads a checkpoint folder with FP8 linear layers: an FP8 compressed-tensors
// checkpoint keeps its quantization (opts.Checkpoint is set from its config.json), any
// other is quantized at load time as opts says. A calibration is first checked against
// the model's configuration ([Calibration.Check]). load configures the rest of the
// loading (compute dtype, progress); its Linear is replaced by opts.
func Load(b compute.Backend, dir string, opts Options, load model.LoadOptions) (*model.Model, error) {
	if err := opts.Strategy.validate(); err != nil {
		return nil, err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	qc, err := ReadQuantizationConfig(dir)
	if err != nil {
		return nil, err
	}
	if opts.Checkpoint == nil {
		opts.Checkpoint = qc
	}
	if opts.Calibration != nil {
		if err := opts.Calibration.Check(cfg, opts.QuantizeHead); err != nil {
			return nil, fmt.Errorf("%w (loading %s)", err, dir)
		}
	}
	load.Linear = opts
	return model.Load(b, dir, load)
}
