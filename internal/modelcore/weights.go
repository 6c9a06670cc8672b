package modelcore

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"
)

// Model is a loaded checkpoint: its configuration and its weights, resident on the
// backend's device.
type Model struct {
	Config Config
	// DType is the compute dtype of activations and dense weights: Float32 or BFloat16.
	DType dtypes.DType

	backend compute.Backend

	// Embed is the token embedding [v, h].
	Embed     *tensors.Tensor
	Layers    []Layer
	FinalNorm *tensors.Tensor
	// Head maps the final hidden state to logits; when the embeddings are tied it is a
	// Dense over Embed.
	Head Linear

	// ropeInvFreq are the rotary inverse frequencies [headDim/2], float32.
	ropeInvFreq *tensors.Tensor
	// paths are the forward pass's choices that depend on the backend.
	paths paths

	programs programCache
	// parallel are the model's tensor-parallel layouts ([Model.TensorParallel]).
	parallel parallelLayouts
	closed   atomic.Bool
}

// ErrClosed is the error (wrapped) of using a model after [Model.Close].
var ErrClosed = errors.New("model: the model is closed")

// errNoBackend is the error of making a model without a backend.
var errNoBackend = errors.New("model: no backend (nil)")

// usable says why m cannot run programs: nil, not made by [Load], [FromCheckpoint] or
// [NewRandom], or closed; nil when it can.
func (m *Model) usable() error {
	switch {
	case m == nil:
		return errors.New("model: nil model")
	case m.backend == nil:
		return errors.New("model: the model has no backend (make it with Load, FromCheckpoint or NewRandom)")
	case m.closed.Load():
		return ErrClosed
	}
	return nil
}

// Layer holds one decoder layer's weights. Q/K/V and gate/up are fused into one
// linear each, so a layer runs four matrix multiplications.
type Layer struct {
	AttnNorm *tensors.Tensor // [h]
	QKV      Linear          // h → (heads + 2·kvHeads)·headDim
	O        Linear          // heads·headDim → h
	MLPNorm  *tensors.Tensor // [h]
	GateUp   Linear          // h → 2·intermediate
	Down     Linear          // intermediate → h
}

// Backend returns the backend the weights live on.
func (m *Model) Backend() compute.Backend { return m.backend }

// NamedLinear is a linear layer of the model and its name, e.g.
// "model.layers.3.self_attn.qkv_proj". Set replaces it in the model; programs compiled
// before read the old weights, so the model drops them (they recompile on next use).
type NamedLinear struct {
	Name   string
	Linear Linear
	Set    func(Linear)
}

// Linears lists the model's linear layers in forward order, the head last.
func (m *Model) Linears() []NamedLinear {
	var out []NamedLinear
	add := func(name string, slot *Linear) {
		out = append(out, NamedLinear{name, *slot, func(x Linear) {
			*slot = x
			m.programs.finalize()
			m.parallel.closeAll()
		}})
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		add(linearName(i, "self_attn.qkv_proj"), &l.QKV)
		add(linearName(i, "self_attn.o_proj"), &l.O)
		add(linearName(i, "mlp.gate_up_proj"), &l.GateUp)
		add(linearName(i, "mlp.down_proj"), &l.Down)
	}
	add("lm_head", &m.Head)
	return out
}

// params lists every device tensor the forward pass reads, each once, in a fixed order;
// of a model whose weights were made only in part (NewRandom or Load failing half way,
// then Close), those it has.
func (m *Model) params() []*tensors.Tensor {
	seen := map[*tensors.Tensor]bool{}
	var list []*tensors.Tensor
	add := func(ts ...*tensors.Tensor) {
		for _, t := range ts {
			if t != nil && !seen[t] {
				seen[t] = true
				list = append(list, t)
			}
		}
	}
	add(m.Embed, m.ropeInvFreq)
	for _, l := range m.Layers {
		add(l.AttnNorm)
		add(l.QKV.Params()...)
		add(l.O.Params()...)
		add(l.MLPNorm)
		add(l.GateUp.Params()...)
		add(l.Down.Params()...)
	}
	add(m.FinalNorm)
	add(m.Head.Params()...)
	return list
}

// WeightBytes is the device memory taken by the weights.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, t := range m.params() {
		n += t.Shape().ByteSize()
	}
	return n
}

// Close frees the device memory of the weights and compiled programs. Using the model
// afterwards is an error wrapping [ErrClosed]; closing it again does nothing.
func (m *Model) Close() error {
	if m == nil || m.closed.Swap(true) {
		return nil
	}
	m.programs.finalize()
	m.parallel.closeAll()
	for _, t := range m.params() {
		if err := t.FinalizeAll(); err != nil {
			return fmt.Errorf("model: freeing weights: %w", err)
		}
	}
	return nil
}
