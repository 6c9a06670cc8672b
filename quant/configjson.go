package quant

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blockdiff/blockdiff/model"
)

// configFields returns the fields of a config.json describing cfg, for models that have
// none (such as [model.NewRandom] ones): model.ParseConfig reads them back to cfg.
func configFields(cfg model.Config) (map[string]any, error) {
	fields := map[string]any{
		"architectures":           []string{cfg.Architecture},
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
	switch cfg.Architecture {
	case model.ArchMiniCPM:
		fields["model_type"] = "minicpm"
		fields["scale_emb"] = cfg.ScaleEmb
		fields["scale_depth"] = cfg.ScaleDepth
		fields["dim_model_base"] = cfg.DimModelBase
	case model.ArchLlama:
		fields["model_type"] = "llama"
	default:
		return nil, fmt.Errorf("quant: cannot describe architecture %q in a config.json", cfg.Architecture)
	}
	if len(cfg.EOSTokenIDs) > 0 {
		fields["eos_token_id"] = cfg.EOSTokenIDs
	}
	if cfg.MaskTokenID >= 0 {
		fields["mask_token_id"] = cfg.MaskTokenID
	}
	if cfg.RopeFactors != nil {
		fields["rope_scaling"] = map[string]any{
			"rope_type":        "longrope",
			"short_factor":     cfg.RopeFactors,
			"long_factor":      cfg.RopeFactors,
			"attention_factor": cfg.RopeAttentionFactor,
		}
	}
	return fields, nil
}

// baseConfig returns the config.json fields a saved checkpoint starts from: those of the
// file at source (a config.json or a folder holding one), or generated from cfg when
// source is empty.
func baseConfig(source string, cfg model.Config) (map[string]json.RawMessage, error) {
	var data []byte
	if source == "" {
		fields, err := configFields(cfg)
		if err != nil {
			return nil, err
		}
		if data, err = json.Marshal(fields); err != nil {
			return nil, fmt.Errorf("quant: encoding config: %w", err)
		}
	} else {
		if info, err := os.Stat(source); err == nil && info.IsDir() {
			source = filepath.Join(source, "config.json")
		}
		var err error
		if data, err = os.ReadFile(source); err != nil {
			return nil, fmt.Errorf("quant: reading the source config: %w", err)
		}
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("quant: source config %s: %w", source, err)
	}
	return out, nil
}
