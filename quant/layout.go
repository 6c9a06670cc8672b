package quant

import (
	"fmt"

	"github.com/blockdiff/blockdiff/model"
)

// linearLayout describes one linear layer of a model as the checkpoint stores it: the
// modules fused into it, in order, and their output sizes.
type linearLayout struct {
	name  string
	parts []string
	outs  []int
}

// linearLayouts lists the linear layers of a configuration in forward order, as
// the model lists them (modelcore.Model.Linears), with the checkpoint modules they fuse (as model.Load reads
// them).
func linearLayouts(cfg model.Config) []linearLayout {
	d, h := cfg.HeadDim, cfg.HiddenSize
	var out []linearLayout
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out = append(out,
			linearLayout{p + "self_attn.qkv_proj", []string{p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
				[]int{cfg.NumHeads * d, cfg.NumKVHeads * d, cfg.NumKVHeads * d}},
			linearLayout{p + "self_attn.o_proj", []string{p + "self_attn.o_proj"}, []int{h}},
			linearLayout{p + "mlp.gate_up_proj", []string{p + "mlp.gate_proj", p + "mlp.up_proj"},
				[]int{cfg.IntermediateSize, cfg.IntermediateSize}},
			linearLayout{p + "mlp.down_proj", []string{p + "mlp.down_proj"}, []int{h}},
		)
	}
	return append(out, linearLayout{HeadName, []string{HeadName}, []int{cfg.VocabSize}})
}
