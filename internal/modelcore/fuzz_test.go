package modelcore

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseConfig feeds arbitrary bytes to ParseConfig. It must never panic, and what
// it accepts must pass Validate with every number within bounds: ids in the
// vocabulary, real numbers finite, the tensor shapes computable without overflow and
// the rotary frequencies finite.
//
//	go test -fuzz=FuzzParseConfig -fuzztime=1000000x -parallel 1 ./model
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(strings.Replace(llamaConfig, "%s", "", 1)))
	f.Add([]byte(strings.Replace(llamaConfig, "%s", `, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 2, 4, 8],
		"long_factor": [1, 2, 4, 8], "original_max_position_embeddings": 32}, "pad_token_id": 0, "bos_token_id": 1`, 1)))
	f.Add([]byte(`{"architectures": ["MiniCPMForCausalLM"], "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
		"max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "hidden_act": "silu",
		"tie_word_embeddings": true, "scale_emb": 4.0, "scale_depth": 1.4, "dim_model_base": 32,
		"bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 319, "torch_dtype": "bfloat16"}`))
	f.Add([]byte(strings.Replace(llamaConfig, "%s", `, "rope_parameters": {"rope_theta": 5e6, "rope_type": "default"}, "head_dim": 2000000000`, 1)))
	f.Add([]byte(strings.Replace(llamaConfig, "%s", `, "intermediate_size": 35184372088832, "rms_norm_eps": 0`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.NoError(t, cfg.Validate())
		for _, v := range []int{cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads,
			cfg.NumKVHeads, cfg.HeadDim, cfg.MaxPositionEmbeddings} {
			require.Positive(t, v)
			require.LessOrEqual(t, v, MaxVocabSize)
		}
		for _, id := range append([]int{cfg.BOSTokenID, cfg.MaskTokenID}, cfg.EOSTokenIDs...) {
			require.Less(t, id, cfg.VocabSize)
			require.GreaterOrEqual(t, id, -1)
		}
		for _, x := range []float64{cfg.RMSNormEps, cfg.RopeTheta, cfg.RopeAttentionFactor, cfg.ScaleEmb, cfg.ScaleDepth, cfg.DimModelBase,
			cfg.residualScale(), cfg.logitScale(), cfg.embedScale()} {
			require.False(t, math.IsNaN(x) || math.IsInf(x, 0), "%g", x)
		}
		list, err := expectedTensors(cfg)
		require.NoError(t, err)
		require.Len(t, list, 9*cfg.NumLayers+3)
		for _, tensor := range list {
			_, err := mulInts(append([]int{8}, tensor.dims...)...)
			require.NoError(t, err, "%s %v", tensor.name, tensor.dims)
		}
		if cfg.HeadDim <= 1<<14 { // larger tables take too long for a fuzz iteration
			inv := cfg.ropeInvFreq()
			require.Len(t, inv, cfg.HeadDim/2)
			for _, x := range inv {
				require.True(t, x > 0 && !math.IsInf(x, 0), "inverse frequency %g", x)
			}
		}
	})
}
