// Package demo builds the small model the examples run when no checkpoint is given:
// random weights behind a byte-level tokenizer, so that they work offline on any
// machine. Its text is noise; the examples say so.
package demo

import (
	"encoding/json"
	"fmt"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// Token ids of the demo vocabulary: the 256 bytes, then the special tokens. The mask
// token is the last row, as in MiniCPM5 diffusion checkpoints.
const (
	BOS  = 256
	EOS  = 257
	Mask = 258
)

// Config is the demo model's shape: a small Llama (MiniCPM5's architecture).
var Config = model.Config{
	Architecture: model.ArchLlama, VocabSize: 259, HiddenSize: 128, IntermediateSize: 256,
	NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 32, MaxPositionEmbeddings: 4096,
	RMSNormEps: 1e-6, RopeTheta: 5e6, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 128,
	BOSTokenID: BOS, EOSTokenIDs: []int{EOS}, MaskTokenID: Mask,
}

// Model returns the demo model with random weights (seeded, so runs repeat).
func Model(b compute.Backend) (*model.Model, error) {
	return model.NewRandom(b, Config, model.DefaultDType(b), 1)
}

// Tokenizer returns the demo byte-level tokenizer: one token per byte, as GPT-2's
// byte-level encoding maps them, and no merges.
func Tokenizer() (*tokenizer.Tokenizer, error) {
	vocab := make(map[string]int, 256)
	for b, r := range byteRunes() {
		vocab[string(r)] = b
	}
	special := func(id int, content string) map[string]any {
		return map[string]any{"id": id, "content": content, "special": true, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false}
	}
	spec := map[string]any{
		"version":      "1.0",
		"added_tokens": []any{special(BOS, "<s>"), special(EOS, "</s>"), special(Mask, "<mask>")},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false,
			"trim_offsets": false, "use_regex": true},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{BOS}, "tokens": []string{"<s>"}}}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}, "byte_fallback": false},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("demo: tokenizer: %w", err)
	}
	config := []byte(`{"bos_token": "<s>", "eos_token": "</s>"}`)
	return tokenizer.FromBytes(data, config)
}

// byteRunes is GPT-2's byte-to-character table: printable bytes stand for themselves,
// the others are shifted above 255.
func byteRunes() [256]rune {
	var table [256]rune
	next := rune(256)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			table[b] = rune(b)
		} else {
			table[b] = next
			next++
		}
	}
	return table
}
