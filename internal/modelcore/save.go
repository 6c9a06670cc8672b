package modelcore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/internal/hostdata"
	"github.com/blockdiff/blockdiff/safetensors"
)

// JSON returns the configuration as a transformers config.json that [ParseConfig] reads
// back to cfg: LlamaForCausalLM (model_type "llama") or MiniCPMForCausalLM with its
// scalars; longrope factors, when set, as rope_scaling with an explicit
// attention_factor.
func (cfg Config) JSON() ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := map[string]any{
		"architectures":           []string{cfg.Architecture},
		"model_type":              "llama",
		"vocab_size":              cfg.VocabSize,
		"hidden_size":             cfg.HiddenSize,
		"intermediate_size":       cfg.IntermediateSize,
		"num_hidden_layers":       cfg.NumLayers,
		"num_attention_heads":     cfg.NumHeads,
		"num_key_value_heads":     cfg.NumKVHeads,
		"head_dim":                cfg.HeadDim,
		"max_position_embeddings": cfg.MaxPositionEmbeddings,
		"rms_norm_eps":            cfg.RMSNormEps,
		"rope_theta":              cfg.RopeTheta,
		"tie_word_embeddings":     cfg.TieWordEmbeddings,
		"hidden_act":              "silu",
		"attention_bias":          false,
		"mlp_bias":                false,
		"bos_token_id":            cfg.BOSTokenID,
		"torch_dtype":             "bfloat16",
	}
	if cfg.Architecture == ArchMiniCPM {
		out["model_type"] = "minicpm"
		out["scale_emb"], out["scale_depth"], out["dim_model_base"] = cfg.ScaleEmb, cfg.ScaleDepth, cfg.DimModelBase
	}
	switch len(cfg.EOSTokenIDs) {
	case 0:
	case 1:
		out["eos_token_id"] = cfg.EOSTokenIDs[0]
	default:
		out["eos_token_id"] = cfg.EOSTokenIDs
	}
	if cfg.MaskTokenID >= 0 {
		out["mask_token_id"] = cfg.MaskTokenID
	}
	if cfg.RopeFactors != nil {
		out["rope_scaling"] = map[string]any{
			"rope_type": "longrope", "short_factor": cfg.RopeFactors, "long_factor": cfg.RopeFactors,
			"attention_factor": cfg.RopeAttentionFactor,
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("model: config.json: %w", err)
	}
	return append(data, '\n'), nil
}

// SaveOptions configure [Model.Save] and [WriteCheckpoint].
type SaveOptions struct {
	// DType the weights are stored in: BFloat16 (the zero value) or Float32.
	DType dtypes.DType
	// MaxShardBytes, when positive, bounds each safetensors file: weights that do not
	// fit in one file of that size are written as shards with an index
	// (model.safetensors.index.json). A tensor that alone exceeds it is an error.
	MaxShardBytes int64
}

// Save writes the model's configuration and weights into folder dir (created if needed)
// as a transformers checkpoint that [Load] opens; see [WriteCheckpoint].
func (m *Model) Save(dir string, opts SaveOptions) error {
	params, err := m.TrainableParams()
	if err != nil {
		return err
	}
	return WriteCheckpoint(dir, m.Config, params, opts)
}

// WriteCheckpoint writes config.json and the weights params (as [Model.TrainableParams] lists
// them for cfg, with any float tensors of their shapes) into folder dir, created if
// needed, in Hugging Face's layout: fused layers split into q_proj, k_proj, v_proj,
// gate_proj and up_proj, no lm_head when the embeddings are tied. Existing files of
// those names are replaced.
func WriteCheckpoint(dir string, cfg Config, params []Param, opts SaveOptions) error {
	stored := safetensors.BF16
	switch opts.DType {
	case dtypes.InvalidDType, dtypes.BFloat16:
	case dtypes.Float32:
		stored = safetensors.F32
	default:
		return fmt.Errorf("model: weights can be saved as BFloat16 or Float32, not %s", opts.DType)
	}
	config, err := cfg.JSON()
	if err != nil {
		return err
	}
	parts, err := checkpointParts(cfg)
	if err != nil {
		return err
	}
	if len(params) != len(parts) {
		return fmt.Errorf("model: %d parameters for a configuration of %d", len(params), len(parts))
	}
	var w safetensors.Writer
	if err := w.SetMetadata("format", "pt"); err != nil {
		return err
	}
	for i, p := range params {
		want := parts[i]
		if p.Name != want.name {
			return fmt.Errorf("model: parameter %d is %q, want %q", i, p.Name, want.name)
		}
		dims := p.Tensor.Shape().Dimensions
		if len(dims) != len(want.dims) || dims[0] != want.dims[0] || (len(dims) == 2 && dims[1] != want.dims[1]) {
			return fmt.Errorf("model: parameter %q has shape %v, want %v", p.Name, dims, want.dims)
		}
		values, err := hostdata.Float32s(p.Tensor)
		if err != nil {
			return fmt.Errorf("model: reading %q: %w", p.Name, err)
		}
		cols := 1
		if len(dims) == 2 {
			cols = dims[1]
		}
		row := 0
		for j, name := range want.split {
			rows := want.rows[j]
			shape := []int{rows, cols}
			if len(dims) == 1 {
				shape = []int{rows}
			}
			if err := w.AddFloat32s(name, stored, shape, values[row*cols:(row+rows)*cols]); err != nil {
				return err
			}
			row += rows
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if opts.MaxShardBytes <= 0 || w.Size() <= opts.MaxShardBytes {
		if err := w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)); err != nil {
			return fmt.Errorf("model: %w", err)
		}
		return nil
	}
	base := strings.TrimSuffix(safetensors.SingleFileName, ".safetensors")
	if _, err := w.WriteShards(dir, base, opts.MaxShardBytes); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return nil
}

// checkpointPart is how one parameter is stored: the checkpoint's tensors it splits into
// along its rows.
type checkpointPart struct {
	name  string
	dims  []int
	cols  int
	split []string
	rows  []int
}

// checkpointParts lists, in [Model.TrainableParams] order, the parameters of a model of cfg
// and the checkpoint tensors each is stored as.
func checkpointParts(cfg Config) ([]checkpointPart, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h, d, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	q, kv := cfg.NumHeads*d, cfg.NumKVHeads*d
	var parts []checkpointPart
	vector := func(name string) {
		parts = append(parts, checkpointPart{name: name, dims: []int{h}, cols: 1, split: []string{name}, rows: []int{h}})
	}
	matrix := func(name string, cols int, split []string, rows []int) {
		total := 0
		for _, r := range rows {
			total += r
		}
		parts = append(parts, checkpointPart{name: name, dims: []int{total, cols}, cols: cols, split: split, rows: rows})
	}
	matrix("model.embed_tokens.weight", h, []string{"model.embed_tokens.weight"}, []int{cfg.VocabSize})
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		vector(p + "input_layernorm.weight")
		matrix(p+"self_attn.qkv_proj.weight", h, []string{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}, []int{q, kv, kv})
		matrix(p+"self_attn.o_proj.weight", q, []string{p + "self_attn.o_proj.weight"}, []int{h})
		vector(p + "post_attention_layernorm.weight")
		matrix(p+"mlp.gate_up_proj.weight", h, []string{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, []int{inter, inter})
		matrix(p+"mlp.down_proj.weight", inter, []string{p + "mlp.down_proj.weight"}, []int{h})
	}
	vector("model.norm.weight")
	if !cfg.TieWordEmbeddings {
		matrix("lm_head.weight", h, []string{"lm_head.weight"}, []int{cfg.VocabSize})
	}
	return parts, nil
}
