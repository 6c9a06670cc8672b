package modelcore

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const llamaConfig = `{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "eos_token_id": [2, 7], "mask_token_id": 63,
 "tie_word_embeddings": false %s}`

func parse(t *testing.T, extra string) (Config, error) {
	t.Helper()
	return ParseConfig([]byte(strings.Replace(llamaConfig, "%s", extra, 1)))
}

func TestParseConfig(t *testing.T) {
	cfg, err := parse(t, "")
	require.NoError(t, err)
	require.Equal(t, 8, cfg.HeadDim, "head_dim defaults to hidden/heads")
	require.Equal(t, []int{2, 7}, cfg.EOSTokenIDs)
	require.Equal(t, 10000.0, cfg.RopeTheta)
	require.Equal(t, 1.0, cfg.embedScale())
	require.Equal(t, 1.0, cfg.residualScale())

	cfg, err = parse(t, `, "rope_parameters": {"rope_theta": 5000000.0, "rope_type": "default"}, "eos_token_id": 5`)
	require.NoError(t, err)
	require.Equal(t, 5e6, cfg.RopeTheta, "transformers 5 keeps rope_theta in rope_parameters")
	require.Equal(t, []int{5}, cfg.EOSTokenIDs)

	require.NoError(t, MiniCPM5_2B.Validate())
}

func TestParseMiniCPM(t *testing.T) {
	base := `{"architectures": ["MiniCPMForCausalLM"], "vocab_size": 64, "hidden_size": 32,
	 "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
	 "max_position_embeddings": 128, "scale_emb": 12, "scale_depth": 1.4 %s}`
	_, err := ParseConfig([]byte(strings.Replace(base, "%s", "", 1)))
	require.ErrorContains(t, err, "dim_model_base", "a missing MiniCPM scalar is named")
	cfg, err := ParseConfig([]byte(strings.Replace(base, "%s", `, "dim_model_base": 16`, 1)))
	require.NoError(t, err)
	require.InDelta(t, 1.4/2, cfg.residualScale(), 1e-12)
	require.InDelta(t, 0.5, cfg.logitScale(), 1e-12)
	require.True(t, cfg.TieWordEmbeddings, "transformers defaults to tied embeddings")
}

func TestLongRope(t *testing.T) {
	factors := `[1.0, 2.0, 4.0, 8.0]`
	cfg, err := parse(t, `, "rope_scaling": {"rope_type": "longrope", "short_factor": `+factors+
		`, "long_factor": `+factors+`, "original_max_position_embeddings": 32}`)
	require.NoError(t, err)
	inv := cfg.ropeInvFreq()
	for i, f := range []float64{1, 2, 4, 8} {
		require.InDelta(t, 1/(f*math.Pow(10000, float64(2*i)/8)), inv[i], 1e-15)
	}
	// max_position_embeddings 128 over the original 32: scale 4.
	require.InDelta(t, math.Sqrt(1+math.Log(4)/math.Log(32)), cfg.RopeAttentionFactor, 1e-12)
}

func TestUnsupportedConfigs(t *testing.T) {
	for name, c := range map[string]struct{ extra, want string }{
		"rope type": {`, "rope_scaling": {"type": "linear", "factor": 2.0}`, `unsupported rope_scaling type "linear"`},
		"longrope factors differ": {`, "rope_scaling": {"rope_type": "longrope", "short_factor": [1,1,1,1], "long_factor": [1,1,1,2]}`,
			"differs from long_factor"},
		"longrope length": {`, "rope_scaling": {"rope_type": "longrope", "short_factor": [1], "long_factor": [1]}`, "needs 4"},
		"activation":      {`, "hidden_act": "gelu"`, `unsupported hidden_act "gelu"`},
		"gqa":             {`, "num_key_value_heads": 3`, "multiple of num_key_value_heads"},
		"mask":            {`, "mask_token_id": 64`, "mask_token_id 64 is outside"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(t, c.extra)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := ParseConfig([]byte(`{"architectures": ["GPT2LMHeadModel"]}`))
	require.ErrorContains(t, err, `unsupported architecture "GPT2LMHeadModel"`)
	_, err = ParseConfig([]byte(`{"architectures": ["LlamaForCausalLM"], "hidden_size": 8}`))
	require.ErrorContains(t, err, "vocab_size")
	_, err = ParseConfig([]byte(`not json`))
	require.ErrorContains(t, err, "invalid config.json")
}
