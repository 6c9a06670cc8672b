package modelcore

import (
	"fmt"
	"math"
	"slices"

	"github.com/blockdiff/blockdiff/safetensors"
)

// expectedTensor is a checkpoint tensor and the shape the configuration gives it.
type expectedTensor struct {
	name string
	dims []int
	why  string // the config.json fields the shape comes from
}

// expectedTensors lists the tensors a checkpoint of cfg (validated) holds, with their
// shapes, computed with overflow checks. Only the tied head's lm_head is optional.
func expectedTensors(cfg Config) ([]expectedTensor, error) {
	h, d := cfg.HiddenSize, cfg.HeadDim
	qOut, err := mulInts(cfg.NumHeads, d)
	if err != nil {
		return nil, fmt.Errorf("config: num_attention_heads × head_dim: %w", err)
	}
	kvOut, err := mulInts(cfg.NumKVHeads, d)
	if err != nil {
		return nil, fmt.Errorf("config: num_key_value_heads × head_dim: %w", err)
	}
	inter := cfg.IntermediateSize
	list := []expectedTensor{{"model.embed_tokens.weight", []int{cfg.VocabSize, h}, "vocab_size, hidden_size"}}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		list = append(list,
			expectedTensor{p + "input_layernorm.weight", []int{h}, "hidden_size"},
			expectedTensor{p + "self_attn.q_proj.weight", []int{qOut, h}, "num_attention_heads × head_dim, hidden_size"},
			expectedTensor{p + "self_attn.k_proj.weight", []int{kvOut, h}, "num_key_value_heads × head_dim, hidden_size"},
			expectedTensor{p + "self_attn.v_proj.weight", []int{kvOut, h}, "num_key_value_heads × head_dim, hidden_size"},
			expectedTensor{p + "self_attn.o_proj.weight", []int{h, qOut}, "hidden_size, num_attention_heads × head_dim"},
			expectedTensor{p + "post_attention_layernorm.weight", []int{h}, "hidden_size"},
			expectedTensor{p + "mlp.gate_proj.weight", []int{inter, h}, "intermediate_size, hidden_size"},
			expectedTensor{p + "mlp.up_proj.weight", []int{inter, h}, "intermediate_size, hidden_size"},
			expectedTensor{p + "mlp.down_proj.weight", []int{h, inter}, "hidden_size, intermediate_size"},
		)
	}
	list = append(list, expectedTensor{"model.norm.weight", []int{h}, "hidden_size"},
		expectedTensor{"lm_head.weight", []int{cfg.VocabSize, h}, "vocab_size, hidden_size"})
	return list, nil
}

// checkTensors checks that ckpt holds every tensor cfg needs, in the shape cfg gives
// it, before anything is sized from cfg: a config.json whose numbers the tensors do
// not confirm is an error naming the tensor and the fields.
func checkTensors(cfg Config, ckpt safetensors.Checkpoint) error {
	list, err := expectedTensors(cfg)
	if err != nil {
		return err
	}
	for _, t := range list {
		info, ok := ckpt.Lookup(t.name)
		switch {
		case !ok && t.name == "lm_head.weight" && cfg.TieWordEmbeddings:
		case !ok:
			return fmt.Errorf("missing tensor %q (config.json: num_hidden_layers %d, tie_word_embeddings %t)",
				t.name, cfg.NumLayers, cfg.TieWordEmbeddings)
		case !slices.Equal(info.Shape, t.dims):
			return fmt.Errorf("tensor %q has shape %v, want %v (config.json: %s)", t.name, info.Shape, t.dims, t.why)
		}
	}
	return nil
}

// mulInts returns the product of non-negative factors, or an error if it overflows.
func mulInts(factors ...int) (int, error) {
	p := 1
	for _, f := range factors {
		if f < 0 {
			return 0, fmt.Errorf("negative factor %d", f)
		}
		if f != 0 && p > math.MaxInt/f {
			return 0, fmt.Errorf("%v: product overflows", factors)
		}
		p *= f
	}
	return p, nil
}

// addInts returns the sum of non-negative terms, or an error if it overflows.
func addInts(terms ...int) (int, error) {
	s := 0
	for _, t := range terms {
		if t < 0 {
			return 0, fmt.Errorf("negative term %d", t)
		}
		if s > math.MaxInt-t {
			return 0, fmt.Errorf("%v: sum overflows", terms)
		}
		s += t
	}
	return s, nil
}
