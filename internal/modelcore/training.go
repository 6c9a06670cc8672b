package modelcore

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
)

// Param is one of a model's trainable weights.
type Param struct {
	// Name is the checkpoint's name of the weight, e.g. "model.norm.weight"; fused
	// linear layers carry the fused layer's, e.g. "model.layers.0.self_attn.qkv_proj.weight"
	// ([WriteCheckpoint] splits them into the checkpoint's parts).
	Name string
	// Tensor holds the weight: the model's device tensor in the list [Model.TrainableParams]
	// returns; any float tensor of its shape for [WriteCheckpoint].
	Tensor *tensors.Tensor
	// Decays reports whether decoupled weight decay applies, as usual: to the linear
	// layers' weights, not to norms or embeddings (nor a head tied to them).
	Decays bool
}

// TrainableParams lists the model's trainable weights, each once, in the order
// [Model.BindWeights] takes them. Models whose linear layers are not [Dense] (quantized
// ones) have none to train and return an error.
func (m *Model) TrainableParams() ([]Param, error) {
	var out []Param
	add := func(name string, t *tensors.Tensor, decays bool) { out = append(out, Param{name, t, decays}) }
	dense := func(name string, lin Linear) error {
		d, ok := lin.(*Dense)
		if !ok {
			return fmt.Errorf("model: %s is a %T, not a dense layer: it cannot be trained", name, lin)
		}
		add(name+".weight", d.Weight, true)
		return nil
	}
	add("model.embed_tokens.weight", m.Embed, false)
	for i, l := range m.Layers {
		prefix := fmt.Sprintf("model.layers.%d.", i)
		add(prefix+"input_layernorm.weight", l.AttnNorm, false)
		for _, lin := range []struct {
			name string
			lin  Linear
		}{{"self_attn.qkv_proj", l.QKV}, {"self_attn.o_proj", l.O}} {
			if err := dense(linearName(i, lin.name), lin.lin); err != nil {
				return nil, err
			}
		}
		add(prefix+"post_attention_layernorm.weight", l.MLPNorm, false)
		for _, lin := range []struct {
			name string
			lin  Linear
		}{{"mlp.gate_up_proj", l.GateUp}, {"mlp.down_proj", l.Down}} {
			if err := dense(linearName(i, lin.name), lin.lin); err != nil {
				return nil, err
			}
		}
	}
	add("model.norm.weight", m.FinalNorm, false)
	if d, ok := m.Head.(*Dense); ok && d.Weight == m.Embed {
		return out, nil // tied: the embedding is the head's weight
	}
	if err := dense("lm_head", m.Head); err != nil {
		return nil, err
	}
	return out, nil
}

// BindWeights returns the model's weights as the caller's nodes, one per entry of
// [Model.TrainableParams] in its order and of its shape, e.g. float32 master weights that are
// parameters of a training step, so that graph.Gradient differentiates with respect to
// them. Their dtype may differ from the model's: [Model.ForwardTraining] converts each
// where it is used. The rotary frequencies become a constant. It panics (as graph
// construction does) when the nodes do not match.
func (m *Model) BindWeights(nodes []*Node) *Weights {
	params, err := m.TrainableParams()
	if err != nil {
		panic(err)
	}
	if len(nodes) != len(params) {
		exceptions.Panicf("model: BindWeights got %d nodes for %d parameters", len(nodes), len(params))
	}
	if len(nodes) == 0 {
		exceptions.Panicf("model: BindWeights got no nodes")
	}
	g := nodes[0].Graph()
	w := &Weights{Model: m, nodes: make(map[*tensors.Tensor]*Node, len(params)+1)}
	for i, p := range params {
		want, got := p.Tensor.Shape(), nodes[i].Shape()
		if !got.DType.IsFloat() || !slices.Equal(want.Dimensions, got.Dimensions) {
			exceptions.Panicf("model: BindWeights: %s is %s, want a float node of dimensions %v", p.Name, got, want.Dimensions)
		}
		w.order = append(w.order, p.Tensor)
		w.nodes[p.Tensor] = nodes[i]
	}
	inv := m.Config.ropeInvFreq()
	inv32 := make([]float32, len(inv))
	for i, f := range inv {
		inv32[i] = float32(f)
	}
	w.RopeInvFreq = Const(g, inv32)
	w.nodes[m.ropeInvFreq] = w.RopeInvFreq
	w.order = append(w.order, m.ropeInvFreq)
	w.Embed = w.nodes[m.Embed]
	return w
}

// TrainingWindow is the input of [Model.ForwardTraining]: tokens at explicit positions
// under an explicit attention visibility, reading no cache. Positions may repeat and
// visibility is arbitrary, e.g. for a noisy and a clean copy of a sequence side by side.
type TrainingWindow struct {
	// Tokens [b, w] int32.
	Tokens *Node
	// Positions [b, w] int32: each token's position, which sets its rotary angle.
	Positions *Node
	// Visible [b, w, w] or [w, w] bool: query i attends to key j. Every query must see
	// at least one key.
	Visible *Node
	// LogitIndices [b, r] int32 selects the window positions whose logits are
	// computed; nil computes them all.
	LogitIndices *Node
	// DType is the compute dtype, Float32 or BFloat16; the zero value is the model's.
	DType dtypes.DType
}

// ForwardTraining builds a differentiable forward pass and returns the logits [b, r, v]
// in float32. The weights may be the model's or bound with [Model.BindWeights]. It
// computes what [Model.Forward] computes, with these differences for training:
//   - 1/rms has a gradient: GoMLX defines none for Rsqrt, and this package does not
//     register one in GoMLX's process-wide table. The value is Rsqrt's exactly; the
//     gradient, −½·y³, enters by a straight-through term that adds exactly zero (see
//     [invRMSTrainable]);
//   - attention takes the plain path (no fused op: backends lack its gradient);
//   - linear layers return the compute dtype, converted to float32 after (as
//     PyTorch's autocast does), so that their gradients' products run in the compute
//     dtype rather than float32. In bfloat16 the logits are then rounded to bfloat16
//     where Forward's stay float32; in float32 they are Forward's exactly.
//
// Embedding rows are gathered from the embedding as given (float32 masters) and then
// rounded, so that its gradient accumulates in that dtype.
func (m *Model) ForwardTraining(w *Weights, win TrainingWindow) *Node {
	cfg := m.Config
	compute := win.DType
	if compute == dtypes.InvalidDType {
		compute = m.DType
	}
	if compute != dtypes.Float32 && compute != dtypes.BFloat16 {
		exceptions.Panicf("model: ForwardTraining: compute dtype must be Float32 or BFloat16, got %s", compute)
	}
	dense := func(lin Linear) *Node {
		d, ok := lin.(*Dense)
		if !ok {
			exceptions.Panicf("model: ForwardTraining needs dense layers, got %T", lin)
		}
		return w.Node(d.Weight)
	}
	b, width := win.Tokens.Shape().Dimensions[0], win.Tokens.Shape().Dimensions[1]
	x := ConvertDType(Gather(w.Embed, InsertAxes(win.Tokens, -1)), compute) // [b, w, h]
	if s := cfg.embedScale(); s != 1 {
		x = MulScalar(x, s)
	}
	x = ConvertDType(x, dtypes.Float32)
	rope := newRotary(w.RopeInvFreq, win.Positions, cfg.RopeAttentionFactor)
	var mask masks
	switch vis := win.Visible; {
	case vis.Rank() == 2 && slices.Equal(vis.Shape().Dimensions, []int{width, width}):
		mask.window = Reshape(vis, 1, 1, width, 1, width)
	case vis.Rank() == 3 && slices.Equal(vis.Shape().Dimensions, []int{b, width, width}):
		mask.window = Reshape(vis, b, 1, width, 1, width)
	default:
		exceptions.Panicf("model: ForwardTraining: Visible is %s, want [%d, %d] or [%d, %d, %d] bool", vis.Shape(), width, width, b, width, width)
	}
	if win.Visible.DType() != dtypes.Bool {
		exceptions.Panicf("model: ForwardTraining: Visible must be bool, got %s", win.Visible.DType())
	}

	apply := func(weight, x *Node) *Node {
		x = ConvertDType(x, compute)
		if compute == dtypes.Float32 {
			return (&Dense{}).ApplyFloat32(x, []*Node{weight}) // Forward's product
		}
		return ConvertDType(denseApply(x, weight), dtypes.Float32)
	}
	// normed is Forward's dense path: the row's 1/rms scales the product's output.
	normed := func(weight, x, norm *Node, scale float64) *Node {
		inv := invRMSTrainable(x, cfg.RMSNormEps)
		if scale != 1 {
			inv = MulScalar(inv, scale)
		}
		return Mul(apply(weight, normWeighted(ConvertDType(x, compute), norm)), inv)
	}
	residualScale := cfg.residualScale()
	for _, layer := range m.Layers {
		qkv := ConvertDType(normed(dense(layer.QKV), x, w.Node(layer.AttnNorm), 1), compute)
		attn, _ := m.attention(qkv, nil, rope, mask, Window{}, nil)
		x = addScaled(x, apply(dense(layer.O), attn), residualScale)
		gateUp := normed(dense(layer.GateUp), x, w.Node(layer.MLPNorm), 1)
		x = addScaled(x, apply(dense(layer.Down), swiGLU(gateUp)), residualScale)
	}
	if win.LogitIndices != nil {
		x = takeRows(x, win.LogitIndices)
	}
	return normed(dense(m.Head), x, w.Node(m.FinalNorm), cfg.logitScale())
}

// invRMSTrainable is invRMS with a gradient: y = rsqrt(u) for u = mean(x²) + eps, plus
// (u − u)·c where the first u carries the gradient and c = −½·y³ (dy/du) does not. The
// added term is exactly zero (c is finite: u ≥ eps), so the value is Rsqrt's bit for bit.
func invRMSTrainable(x *Node, eps float64) *Node {
	u := AddScalar(ReduceAndKeep(Square(x), ReduceMean, -1), eps)
	y := StopGradient(Rsqrt(u))
	slope := StopGradient(MulScalar(Mul(Square(y), y), -0.5))
	return Add(y, Mul(Sub(u, StopGradient(u)), slope))
}

// CausalVisibility is the [w, w] visibility of causal attention: query i sees keys j ≤ i.
func CausalVisibility(g *Graph, w int) *Node {
	shape := shapes.Make(dtypes.Int32, w, w)
	return LessOrEqual(Iota(g, shape, 1), Iota(g, shape, 0))
}

// addScaled returns x + y·scale in x's dtype, unmarked: training graphs ask for no kernels.
func addScaled(x, y *Node, scale float64) *Node {
	return Add(x, scaledLike(x, y, scale))
}
