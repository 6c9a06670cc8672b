package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Files returns the tokenizer as the contents of tokenizer.json and tokenizer_config.json,
// in the format of the Hugging Face tokenizers library: a BPE model over byte-level
// characters, a Split pre-tokenizer with the training pattern followed by ByteLevel, the
// ByteLevel decoder, no normalizer (so decoding gives back the exact input), the special
// tokens as added tokens, and a post-processor that puts BOS before a sequence when
// special tokens are requested.
func (b *TrainedBPE) Files() (tokenizerJSON, configJSON []byte, err error) {
	specials := b.cfg.specials()
	first := len(b.tokens)
	type addedToken struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	added := make([]addedToken, len(specials))
	for i, s := range specials {
		added[i] = addedToken{ID: first + i, Content: s, Special: true}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	bos := func(typeID int) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": b.cfg.BOS, "type_id": typeID}}
	}
	seq := func(id string, typeID int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typeID}}
	}

	// The vocabulary is written in id order (a Go map would be sorted by key).
	var vocab bytes.Buffer
	vocab.WriteByte('{')
	for id, tok := range b.tokens {
		if id > 0 {
			vocab.WriteByte(',')
		}
		k, err := marshal(byteLevelEncode(tok))
		if err != nil {
			return nil, nil, err
		}
		vocab.Write(k)
		vocab.WriteByte(':')
		vocab.WriteString(strconv.Itoa(id))
	}
	vocab.WriteByte('}')
	merges := make([][2]string, len(b.merges))
	for i, m := range b.merges {
		merges[i] = [2]string{byteLevelEncode(b.tokens[m[0]]), byteLevelEncode(b.tokens[m[1]])}
	}
	// Fields in the order the Hugging Face library writes them.
	tj := orderedObject{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", nil},
		{"pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": b.cfg.Pattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}}},
		{"post_processor", map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{bos(0), seq("A", 0)},
			"pair":   []any{bos(0), seq("A", 0), bos(1), seq("B", 1)},
			"special_tokens": map[string]any{b.cfg.BOS: map[string]any{
				"id": b.cfg.BOS, "ids": []int{first}, "tokens": []string{b.cfg.BOS},
			}},
		}},
		{"decoder", byteLevel},
		{"model", orderedObject{
			{"type", "BPE"},
			{"dropout", nil},
			{"unk_token", nil},
			{"continuing_subword_prefix", ""},
			{"end_of_word_suffix", ""},
			{"fuse_unk", false},
			{"byte_fallback", false},
			{"ignore_merges", false},
			{"vocab", json.RawMessage(vocab.Bytes())},
			{"merges", merges},
		}},
	}
	if tokenizerJSON, err = marshal(tj); err != nil {
		return nil, nil, err
	}

	decoderEntries := orderedObject{}
	for _, t := range added {
		decoderEntries = append(decoderEntries, field{strconv.Itoa(t.ID), orderedObject{
			{"content", t.Content}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
			{"single_word", false}, {"special", true},
		}})
	}
	cfg := orderedObject{
		{"add_bos_token", true},
		{"add_eos_token", false},
		{"added_tokens_decoder", decoderEntries},
		{"bos_token", b.cfg.BOS},
		{"clean_up_tokenization_spaces", false},
		{"eos_token", b.cfg.EOS},
		{"mask_token", b.cfg.Mask},
		{"model_max_length", 1 << 30},
		{"pad_token", b.cfg.Pad},
		{"tokenizer_class", "PreTrainedTokenizerFast"},
		{"unk_token", nil},
	}
	if configJSON, err = marshal(cfg); err != nil {
		return nil, nil, err
	}
	return tokenizerJSON, configJSON, nil
}

// Tokenizer loads the trained tokenizer through the same reader as any tokenizer.json.
func (b *TrainedBPE) Tokenizer() (*Tokenizer, error) {
	tj, cfg, err := b.Files()
	if err != nil {
		return nil, err
	}
	return FromBytes(tj, cfg)
}

// WriteDir writes tokenizer.json and tokenizer_config.json into dir, creating it if needed.
func (b *TrainedBPE) WriteDir(dir string) error {
	tj, cfg, err := b.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	for name, data := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
	}
	return nil
}

// field and orderedObject write a JSON object with its keys in a chosen order.
type field struct {
	key   string
	value any
}

type orderedObject []field

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := marshal(f.value)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// marshal encodes v as JSON without escaping <, > and & (special tokens are written as
// they are).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("tokenizer: writing JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
