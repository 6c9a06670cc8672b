package sharding

import (
	"fmt"
	"strings"
)

// Shape is what a tensor-parallel plan needs of a model's configuration.
type Shape struct {
	Hidden, Heads, KVHeads, HeadDim, FFN int
}

// Range is the indices [Start, End) of one axis.
type Range struct{ Start, End int }

// Len returns the range's length.
func (r Range) Len() int { return r.End - r.Start }

// Placement says how a weight is laid over the devices. Weights are [out, in], Hugging
// Face's layout: axis 0 is the output features, axis 1 the input features.
type Placement struct {
	// Axis is the weight's split axis (0 or 1), or [Replicated].
	Axis int
	// Parts[d] lists the ranges of Axis that device d holds, concatenated in this order
	// into its shard; nil when replicated.
	Parts [][]Range
}

// ShardLen returns the length of Axis in each device's shard (0 when replicated).
func (p Placement) ShardLen() int {
	if len(p.Parts) == 0 {
		return 0
	}
	n := 0
	for _, r := range p.Parts[0] {
		n += r.Len()
	}
	return n
}

// Contiguous reports whether the shards tile Axis in device order, one range each, so
// that the weight as it is can be split evenly along Axis (a sharding spec on it); when
// not, it is laid out by [Placement.Order] first.
func (p Placement) Contiguous() bool {
	next := 0
	for _, parts := range p.Parts {
		if len(parts) != 1 || parts[0].Start != next {
			return false
		}
		next = parts[0].End
	}
	return true
}

// Order returns the indices of Axis, device after device, that make the weight's
// re-laid copy whose even split along Axis gives each device its shard: a fused layer's
// parts grouped by device, and key/value heads repeated where they are replicated. Nil
// when replicated.
func (p Placement) Order() []int {
	var out []int
	for _, parts := range p.Parts {
		for _, r := range parts {
			for i := r.Start; i < r.End; i++ {
				out = append(out, i)
			}
		}
	}
	return out
}

// TensorParallel is decoding spread over Devices by attention heads and FFN columns:
// device d computes query heads [d·LocalHeads, (d+1)·LocalHeads), the key/value heads
// they read, and FFN columns [d·LocalFFN, (d+1)·LocalFFN); the o and down projections
// take the matching input rows and their partial sums are all-reduced (two all-reduces
// per layer). Embeddings, the head and the norms are replicated.
//
// Key/value heads: when KVHeads is a multiple of Devices each device holds
// KVHeads/Devices of them; when Devices is a multiple of KVHeads (MiniCPM5-2B's 2 over
// 4 or 8 GPUs) each key/value head is replicated on KVReplicas = Devices/KVHeads
// devices, each holding one, as vLLM does: their weights and cache are duplicated
// (small next to the FFN's) so that every device still streams 1/N of the rest. Other
// combinations are refused.
type TensorParallel struct {
	Shape
	Devices int
	// LocalHeads, LocalKVHeads and LocalFFN are each device's share.
	LocalHeads, LocalKVHeads, LocalFFN int
	// KVReplicas is how many devices hold each key/value head (1: none repeated).
	KVReplicas int
}

// TensorAxis is the name of the one mesh axis of a tensor-parallel plan.
const TensorAxis = "tensor"

// CacheKVHeads is the key/value heads of the KV cache laid over the devices, whole:
// each device's LocalKVHeads in device order, so KVHeads·KVReplicas (a head held by
// several devices appears once for each). Split along its heads axis, it gives each
// device the heads its query heads read.
func (p *TensorParallel) CacheKVHeads() int { return p.Devices * p.LocalKVHeads }

// AllReducesPerLayer is the collectives a tensor-parallel layer needs: the partial sums
// of its o and of its down projection.
const AllReducesPerLayer = 2

// NewTensorParallel returns the plan of a model of shape s over devices, or an error
// saying which number does not divide.
func NewTensorParallel(s Shape, devices int) (*TensorParallel, error) {
	if err := checkDevices(devices); err != nil {
		return nil, err
	}
	if s.Hidden < 1 || s.Heads < 1 || s.KVHeads < 1 || s.HeadDim < 1 || s.FFN < 1 {
		return nil, fmt.Errorf("sharding: invalid shape %+v", s)
	}
	if s.Heads%s.KVHeads != 0 {
		return nil, fmt.Errorf("sharding: %d query heads are not a multiple of %d key/value heads", s.Heads, s.KVHeads)
	}
	if s.Heads%devices != 0 {
		return nil, fmt.Errorf("sharding: %d query heads: %w (%d)", s.Heads, errNotDivisible, devices)
	}
	if s.FFN%devices != 0 {
		return nil, fmt.Errorf("sharding: an FFN of %d columns: %w (%d)", s.FFN, errNotDivisible, devices)
	}
	p := &TensorParallel{Shape: s, Devices: devices, LocalHeads: s.Heads / devices, LocalFFN: s.FFN / devices}
	switch {
	case s.KVHeads%devices == 0:
		p.LocalKVHeads, p.KVReplicas = s.KVHeads/devices, 1
	case devices%s.KVHeads == 0:
		// Each device's query heads then lie in one key/value group (Heads/devices divides
		// Heads/KVHeads because devices/KVHeads divides Heads/KVHeads).
		p.LocalKVHeads, p.KVReplicas = 1, devices/s.KVHeads
	default:
		return nil, fmt.Errorf("sharding: %d key/value heads %w (%d), nor is %d a multiple of them to replicate them",
			s.KVHeads, errNotDivisible, devices, devices)
	}
	return p, nil
}

// kvHeads returns the key/value heads device d holds.
func (p *TensorParallel) kvHeads(d int) Range {
	if p.KVReplicas > 1 {
		return Range{d / p.KVReplicas, d/p.KVReplicas + 1}
	}
	return Range{d * p.LocalKVHeads, (d + 1) * p.LocalKVHeads}
}

// perDevice builds a placement from each device's ranges.
func (p *TensorParallel) perDevice(axis int, ranges func(d int) []Range) Placement {
	parts := make([][]Range, p.Devices)
	for d := range parts {
		parts[d] = ranges(d)
	}
	return Placement{Axis: axis, Parts: parts}
}

// scaled returns the range r of heads (or columns) times width, offset by base.
func scaled(r Range, width, base int) Range {
	return Range{base + r.Start*width, base + r.End*width}
}

// QKV places the fused [q | k | v] projection, [(Heads+2·KVHeads)·HeadDim, Hidden]:
// each device's query heads, then its key and its value heads.
func (p *TensorParallel) QKV() Placement {
	hd := p.HeadDim
	return p.perDevice(0, func(d int) []Range {
		kv := p.kvHeads(d)
		return []Range{scaled(p.queryHeads(d), hd, 0), scaled(kv, hd, p.Heads*hd), scaled(kv, hd, (p.Heads+p.KVHeads)*hd)}
	})
}

// Q, K and V place the unfused projections of a checkpoint.
func (p *TensorParallel) Q() Placement {
	return p.perDevice(0, func(d int) []Range { return []Range{scaled(p.queryHeads(d), p.HeadDim, 0)} })
}

// K places a checkpoint's k projection (see [TensorParallel.Q]).
func (p *TensorParallel) K() Placement {
	return p.perDevice(0, func(d int) []Range { return []Range{scaled(p.kvHeads(d), p.HeadDim, 0)} })
}

// V places a checkpoint's v projection (see [TensorParallel.Q]).
func (p *TensorParallel) V() Placement { return p.K() }

// O places the o projection, [Hidden, Heads·HeadDim]: the input rows of the device's
// query heads.
func (p *TensorParallel) O() Placement {
	return p.perDevice(1, func(d int) []Range { return []Range{scaled(p.queryHeads(d), p.HeadDim, 0)} })
}

// GateUp places the fused [gate | up] projection, [2·FFN, Hidden]: the device's
// columns of each.
func (p *TensorParallel) GateUp() Placement {
	return p.perDevice(0, func(d int) []Range {
		return []Range{scaled(p.ffnColumns(d), 1, 0), scaled(p.ffnColumns(d), 1, p.FFN)}
	})
}

// Gate places a checkpoint's gate projection, [FFN, Hidden]; Up is placed alike.
func (p *TensorParallel) Gate() Placement {
	return p.perDevice(0, func(d int) []Range { return []Range{p.ffnColumns(d)} })
}

// Down places the down projection, [Hidden, FFN]: the device's FFN columns as input
// rows.
func (p *TensorParallel) Down() Placement {
	return p.perDevice(1, func(d int) []Range { return []Range{p.ffnColumns(d)} })
}

func (p *TensorParallel) queryHeads(d int) Range {
	return Range{d * p.LocalHeads, (d + 1) * p.LocalHeads}
}

func (p *TensorParallel) ffnColumns(d int) Range {
	return Range{d * p.LocalFFN, (d + 1) * p.LocalFFN}
}

// ForWeight returns the placement of the weight a checkpoint or the model names (e.g.
// "model.layers.3.self_attn.qkv_proj.weight", "model.layers.3.mlp.down_proj.weight"),
// fused or not; embeddings, the head and the norms are replicated. An unknown name is
// an error, so that no weight is replicated by mistake.
func (p *TensorParallel) ForWeight(name string) (Placement, error) {
	base, ok := strings.CutSuffix(name, ".weight")
	if !ok {
		return Placement{}, fmt.Errorf("sharding: %q is not a weight's name", name)
	}
	switch base {
	case "model.embed_tokens", "model.norm", "lm_head":
		return Placement{Axis: Replicated}, nil
	}
	rest, ok := strings.CutPrefix(base, "model.layers.")
	if !ok {
		return Placement{}, fmt.Errorf("sharding: no placement for %q", name)
	}
	_, layer, ok := strings.Cut(rest, ".")
	if !ok {
		return Placement{}, fmt.Errorf("sharding: no placement for %q", name)
	}
	switch layer {
	case "input_layernorm", "post_attention_layernorm":
		return Placement{Axis: Replicated}, nil
	case "self_attn.qkv_proj":
		return p.QKV(), nil
	case "self_attn.q_proj":
		return p.Q(), nil
	case "self_attn.k_proj":
		return p.K(), nil
	case "self_attn.v_proj":
		return p.V(), nil
	case "self_attn.o_proj":
		return p.O(), nil
	case "mlp.gate_up_proj":
		return p.GateUp(), nil
	case "mlp.gate_proj", "mlp.up_proj":
		return p.Gate(), nil
	case "mlp.down_proj":
		return p.Down(), nil
	}
	return Placement{}, fmt.Errorf("sharding: no placement for %q", name)
}
