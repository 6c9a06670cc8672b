package quant

import (
	"fmt"

	"github.com/blockdiff/blockdiff/internal/hostdata"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// QuantizeModel replaces the dense linear layers of a model (loaded, or made by
// [model.NewRandom]) with FP8 ones, quantized as [Options] says: weight scales per
// opts.Strategy, static input scales from opts.Calibration (which must fit the model),
// lm_head only with opts.QuantizeHead, decoded by opts.Decoder. Layers that are already
// [FP8Linear] are kept (their decoder set); with a calibration their input scale is
// replaced. The dense weights replaced are freed,
// except the embedding that a tied head shares.
//
// Programs the model compiled before are dropped and recompile on their next use. The
// options and the calibration are checked before any layer changes; an error afterwards
// (such as a non-finite weight) leaves the model partly quantized, to be closed.
func QuantizeModel(pub *model.Model, opts Options) error {
	m := modelcore.Of(pub)
	if err := opts.Strategy.validate(); err != nil {
		return err
	}
	if opts.Calibration != nil {
		if err := opts.Calibration.Check(pub.Config, opts.QuantizeHead); err != nil {
			return err
		}
	}
	for _, nl := range m.Linears() {
		if nl.Name == HeadName && !opts.QuantizeHead {
			continue
		}
		var inputScale float32
		if opts.Calibration != nil {
			var err error
			if inputScale, err = opts.Calibration.InputScale(nl.Name); err != nil {
				return err
			}
		}
		switch lin := nl.Linear.(type) {
		case *FP8Linear:
			lin.Decoder = opts.Decoder
			if opts.Calibration != nil {
				if err := lin.setInputScale(m, inputScale); err != nil {
					return fmt.Errorf("quant: %s: %w", nl.Name, err)
				}
			}
		case *modelcore.Dense:
			q, err := quantizeDense(m, lin, opts.Strategy, inputScale)
			if err != nil {
				return fmt.Errorf("quant: %s: %w", nl.Name, err)
			}
			q.Decoder = opts.Decoder
			nl.Set(q)
			if lin.Weight != m.Embed {
				if err := lin.Weight.FinalizeAll(); err != nil {
					return fmt.Errorf("quant: %s: freeing the dense weight: %w", nl.Name, err)
				}
			}
		default:
			return fmt.Errorf("quant: %s: cannot quantize a linear layer of type %T", nl.Name, nl.Linear)
		}
	}
	return nil
}

// quantizeDense reads a dense layer's weight back from the device and quantizes it.
func quantizeDense(m *modelcore.Model, d *modelcore.Dense, strategy Strategy, inputScale float32) (*FP8Linear, error) {
	w, err := hostdata.Float32s(d.Weight)
	if err != nil {
		return nil, err
	}
	out, in := d.OutFeatures(), d.InFeatures()
	q, scales, err := quantizeWeight(w, out, in, strategy)
	if err != nil {
		return nil, err
	}
	return NewFP8Linear(m.Backend(), q, out, in, scales, inputScale)
}

// setInputScale replaces the layer's input scale (a new device scalar).
func (l *FP8Linear) setInputScale(m *modelcore.Model, s float32) error {
	t, err := uploadFloat32s(m.Backend(), []float32{s})
	if err != nil {
		return err
	}
	if l.InputScale != nil {
		if err := l.InputScale.FinalizeAll(); err != nil {
			return err
		}
	}
	l.InputScale = t
	return nil
}
