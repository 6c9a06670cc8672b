package train

import (
	"fmt"

	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/sharding"
)

// stepInputKind returns what input i of the step program is, for n parameters: the
// masters and moments, then the statistics, random state and step number, the batch's
// tokens, segments and positions, and the frozen base weights.
func stepInputKind(i, n int) sharding.InputKind {
	switch {
	case i < n:
		return sharding.Weights
	case i < 3*n:
		return sharding.OptimizerState
	case i < 3*n+3:
		return sharding.StepState
	case i < 3*n+6:
		return sharding.BatchRows
	}
	return sharding.Weights
}

// replicate makes devices 1… a copy each of device 0's replicated state (masters,
// moments, statistics, random state) and of the frozen base weights, through the host,
// replacing the copies they had. On one device it does nothing.
func (t *Trainer) replicate() error {
	for _, list := range append(t.replicas, t.baseReplicas...) {
		for _, x := range list {
			_ = x.FinalizeAll()
		}
	}
	t.replicas, t.baseReplicas = nil, nil
	if t.plan.Devices <= 1 {
		return nil
	}
	state := append(append(append(append([]*tensors.Tensor{}, t.masters...), t.moment1...), t.moment2...), t.stats, t.rng)
	clones := func(list []*tensors.Tensor) ([]*tensors.Tensor, error) {
		out := make([]*tensors.Tensor, len(list))
		for i, x := range list {
			c, err := x.LocalClone()
			if err != nil {
				return nil, fmt.Errorf("train: copying the state to another device: %w", err)
			}
			out[i] = c
		}
		return out, nil
	}
	for range t.plan.Devices - 1 {
		s, err := clones(state)
		if err != nil {
			return err
		}
		t.replicas = append(t.replicas, s)
		b, err := clones(t.base())
		if err != nil {
			return err
		}
		t.baseReplicas = append(t.baseReplicas, b)
	}
	return nil
}

// slice returns the rows [start, end), sharing r's storage.
func (r *Rows) slice(start, end int) *Rows {
	if start == 0 && end == r.Rows {
		return r
	}
	w := r.Width
	return &Rows{Rows: end - start, Width: w, Tokens: r.Tokens[start*w : end*w],
		Segments: r.Segments[start*w : end*w], Positions: r.Positions[start*w : end*w]}
}
