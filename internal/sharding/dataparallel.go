package sharding

import (
	"errors"
	"fmt"
)

// Replicated is the axis of a tensor held whole on every device.
const Replicated = -1

// BatchAxis is the name of the one mesh axis of a data-parallel plan.
const BatchAxis = "batch"

// MaxDevices bounds the devices a plan spreads over (a host holds at most 8 GPUs today;
// the bound only keeps sizes derived from it small).
const MaxDevices = 1024

// InputKind says what a program input is, which decides how a data-parallel plan places
// it.
type InputKind int

const (
	// Weights are the float32 master weights, or a frozen copy of the model's own.
	Weights InputKind = iota
	// OptimizerState is AdamW's first and second moments.
	OptimizerState
	// StepState is the small state every device needs whole: the step number, the
	// accumulated statistics, the random state.
	StepState
	// BatchRows is a [rows, …] input of the step's data (tokens, segments, positions).
	BatchRows
)

// String names the kind.
func (k InputKind) String() string {
	switch k {
	case Weights:
		return "weights"
	case OptimizerState:
		return "optimizer state"
	case StepState:
		return "step state"
	case BatchRows:
		return "batch rows"
	}
	return fmt.Sprintf("InputKind(%d)", int(k))
}

// DataParallel is a training step spread over Devices: each takes PerDevice of the
// Batch rows; everything else is replicated, and XLA all-reduces the gradients (the
// loss is the mean over the whole batch, so the result is one device's up to the order
// of float sums).
type DataParallel struct {
	Devices, Batch, PerDevice int
}

// NewDataParallel returns the plan of a step of batch rows over devices, or an error
// when the rows do not divide evenly (every device must run the same program on the
// same shapes).
func NewDataParallel(devices, batch int) (DataParallel, error) {
	if err := checkDevices(devices); err != nil {
		return DataParallel{}, err
	}
	if batch < 1 {
		return DataParallel{}, fmt.Errorf("sharding: batch %d must be positive", batch)
	}
	if batch%devices != 0 {
		return DataParallel{}, fmt.Errorf("sharding: a batch of %d rows does not divide over %d devices "+
			"(use a multiple of %d, e.g. %d)", batch, devices, devices, (batch/devices+1)*devices)
	}
	return DataParallel{Devices: devices, Batch: batch, PerDevice: batch / devices}, nil
}

// Axis returns the axis of an input of that kind split over the devices: 0 for the
// batch's rows, [Replicated] for the rest.
func (p DataParallel) Axis(kind InputKind) int {
	if kind == BatchRows {
		return 0
	}
	return Replicated
}

// Distributed reports whether the plan spreads over more than one device; a plan of one
// device runs the ordinary, undistributed program.
func (p DataParallel) Distributed() bool { return p.Devices > 1 }

// RowRange returns the rows [start, end) of the batch that device d takes.
func (p DataParallel) RowRange(d int) (start, end int) {
	return d * p.PerDevice, (d + 1) * p.PerDevice
}

// checkDevices checks a number of devices.
func checkDevices(devices int) error {
	if devices < 1 {
		return fmt.Errorf("sharding: %d devices: need at least one", devices)
	}
	if devices > MaxDevices {
		return fmt.Errorf("sharding: %d devices: at most %d", devices, MaxDevices)
	}
	return nil
}

// errNotDivisible is wrapped by the tensor-parallel plan's refusals.
var errNotDivisible = errors.New("does not divide over the devices")
