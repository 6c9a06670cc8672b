package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ErrUnsupported is wrapped by the errors for components of tokenizer.json that this package
// does not implement; the message names the component type.
var ErrUnsupported = errors.New("tokenizer: unsupported")

// ErrInvalidUTF8 is returned when the text to encode is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")

// Tokenizer encodes text to token ids and decodes ids to text, following a Hugging Face
// tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	model      *bpeModel
	normalizer normalizer
	pre        preTokenizer
	// lazyBytes: the last pre-tokenizer is ByteLevel and the model maps bytes itself.
	lazyBytes bool
	post      postProcessor
	decoder   decoderSpec
	added     *addedVocab

	idToToken   []string
	decodeToken []string // idToToken, with normalized added tokens in normalized form
	hasToken    []bool
	special     []bool

	config    Config
	templates chatTemplates
}

// LoadDir loads tokenizer.json from dir, with tokenizer_config.json when present. When the
// configuration has no chat template, a chat_template.jinja file in dir is used instead.
// The files must be regular files (a FIFO is refused rather than waited on) of bounded
// size: 1 GiB for tokenizer.json, 64 MiB for tokenizer_config.json, 1 MiB for
// chat_template.jinja.
func LoadDir(dir string) (*Tokenizer, error) {
	tj, err := readModelFile(filepath.Join(dir, "tokenizer.json"), maxTokenizerJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := readModelFile(filepath.Join(dir, "tokenizer_config.json"), maxConfigBytes)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		cfg = nil
	}
	t, err := FromBytes(tj, cfg)
	if err != nil {
		return nil, err
	}
	if t.config.ChatTemplate == "" {
		src, err := readModelFile(filepath.Join(dir, "chat_template.jinja"), maxChatTemplateBytes)
		switch {
		case err == nil:
			t.config.ChatTemplate = string(src)
			if t.config.ChatTemplates == nil {
				t.config.ChatTemplates = map[string]string{}
			}
			t.config.ChatTemplates["default"] = string(src)
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	return t, nil
}

// Load reads a tokenizer from the contents of tokenizer.json and, when config is not nil,
// tokenizer_config.json (at most 1 GiB and 64 MiB).
func Load(tokenizerJSON, config io.Reader) (*Tokenizer, error) {
	tj, err := readAtMost(tokenizerJSON, maxTokenizerJSONBytes, "tokenizer.json")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: reading tokenizer.json: %w", err)
	}
	var cfg []byte
	if config != nil {
		if cfg, err = readAtMost(config, maxConfigBytes, "tokenizer_config.json"); err != nil {
			return nil, fmt.Errorf("tokenizer: reading tokenizer_config.json: %w", err)
		}
	}
	return FromBytes(tj, cfg)
}

// FromBytes builds a tokenizer from the bytes of tokenizer.json and of tokenizer_config.json
// (nil or empty when there is none). Components it does not implement make it fail with an
// error wrapping ErrUnsupported that names them.
func FromBytes(tokenizerJSON, config []byte) (*Tokenizer, error) {
	// Each component is decoded once into a JSON tree that its parser reads; the model's
	// vocabulary and merges, the bulk of the file, go straight into maps. Every byte is
	// therefore scanned a fixed number of times, however deeply the file nests.
	if err := checkJSONDepth(tokenizerJSON); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	var top struct {
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(tokenizerJSON, &top); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	var f struct {
		AddedTokens, Normalizer, PreTokenizer, PostProcessor, Decoder any
		Model                                                         json.RawMessage
	}
	f.Model = top.Model
	for _, c := range []struct {
		key string
		raw json.RawMessage
		dst *any
	}{
		{"added_tokens", top.AddedTokens, &f.AddedTokens}, {"normalizer", top.Normalizer, &f.Normalizer},
		{"pre_tokenizer", top.PreTokenizer, &f.PreTokenizer}, {"post_processor", top.PostProcessor, &f.PostProcessor},
		{"decoder", top.Decoder, &f.Decoder},
	} {
		if isNull(c.raw) {
			continue
		}
		if err := decodeJSON(c.raw, c.dst); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer.json: field %q: %w", c.key, err)
		}
	}
	t := &Tokenizer{}
	var err error
	if isNull(f.Model) {
		return nil, errors.New("tokenizer: tokenizer.json has no model")
	}
	var model map[string]json.RawMessage
	if err := json.Unmarshal(f.Model, &model); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: model: %w", err)
	}
	mo := object{}
	for k, raw := range model {
		if k == "vocab" || k == "merges" {
			continue
		}
		var v any
		if err := decodeJSON(raw, &v); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer.json: model: field %q: %w", k, err)
		}
		mo[k] = v
	}
	switch typ := mo.typeName(); {
	case typ == "BPE" || (typ == "" && !isNull(model["merges"])):
		if t.model, err = parseBPE(mo, model["vocab"], model["merges"]); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	case typ == "":
		return nil, fmt.Errorf("%w: model without a type (only BPE is implemented)", ErrUnsupported)
	default:
		return nil, fmt.Errorf("%w: model type %q (only BPE is implemented)", ErrUnsupported, typ)
	}
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t.lazyBytes = deferByteMapping(t.pre)
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.decoder, err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.added, err = parseAddedTokens(f.AddedTokens, t.normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := t.buildIDTables(); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	if t.post != nil {
		for _, id := range t.post.specialIDs(nil) {
			if id < 0 || id >= len(t.idToToken) || !t.hasToken[id] {
				return nil, fmt.Errorf("tokenizer: tokenizer.json: post_processor: special token id %d is not in the vocabulary", id)
			}
		}
	}
	if len(bytes.TrimSpace(config)) > 0 {
		if t.config, err = parseConfig(config); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	return t, nil
}

// deferByteMapping finds a ByteLevel pre-tokenizer that runs last and lets the model do its
// byte mapping instead, so that cached words skip it. It reports whether it did.
func deferByteMapping(p preTokenizer) bool {
	switch v := p.(type) {
	case *byteLevelPreTokenizer:
		v.mapBytes = false
		return true
	case seqPreTokenizer:
		if len(v) > 0 {
			return deferByteMapping(v[len(v)-1])
		}
	}
	return false
}

// maxTokenID is the largest token id a tokenizer.json may use.
const maxTokenID = 1 << 30

// maxIDGap bounds how far token ids may run past the number of tokens: the id tables are
// sized by the largest id, so a sparse id must not make them much larger than the file.
const maxIDGap = 1 << 16

func (t *Tokenizer) buildIDTables() error {
	size, maxID := 0, 0
	for _, id := range t.model.vocab {
		if int(id) >= size {
			size, maxID = int(id)+1, int(id)
		}
	}
	for _, tok := range t.added.tokens {
		if tok.ID >= size {
			size, maxID = tok.ID+1, tok.ID
		}
	}
	count := len(t.model.vocab) + len(t.added.tokens)
	if limit := 2*count + maxIDGap; size > limit {
		return fmt.Errorf("token id %d is far beyond the %d tokens the file defines (ids must stay below %d)", maxID, count, limit)
	}
	t.idToToken = make([]string, size)
	t.hasToken = make([]bool, size)
	t.special = make([]bool, size)
	for tok, id := range t.model.vocab {
		// Keep the result deterministic if two tokens share an id.
		if !t.hasToken[id] || tok < t.idToToken[id] {
			t.idToToken[id] = tok
		}
		t.hasToken[id] = true
	}
	specials := map[string]bool{}
	for _, tok := range t.added.tokens {
		if tok.Special {
			specials[tok.Content] = true
		}
	}
	for id, tok := range t.added.byID {
		t.idToToken[id] = tok.Content
		t.hasToken[id] = true
	}
	t.decodeToken = t.idToToken
	if len(t.added.decodeAs) > 0 {
		t.decodeToken = append([]string(nil), t.idToToken...)
		for id, s := range t.added.decodeAs {
			t.decodeToken[id] = s
		}
	}
	// Decoding skips a token when its decoded string is the content of a special token.
	for id := range t.idToToken {
		t.special[id] = t.hasToken[id] && specials[t.decodeToken[id]]
	}
	return nil
}

// EncodeOptions controls EncodeWith.
type EncodeOptions struct {
	// AddSpecialTokens runs the post-processor, which adds the tokens the model expects
	// around a sequence (BOS for Llama-style models; nothing for Qwen).
	AddSpecialTokens bool
	// ParseSpecialTokens makes text that spells a special token, such as "<|im_end|>", become
	// that token. It is off by default because text typed by a user must not be able to
	// smuggle control tokens into a prompt (prompt injection): with it off, such text is
	// tokenized as the ordinary characters it is made of. Turn it on for text whose special
	// tokens are known to be real, such as a prompt rendered by a chat template. Added tokens
	// that are not special (for Qwen, "<think>" or "<tool_call>") are always recognised, as
	// in the Hugging Face library with split_special_tokens.
	ParseSpecialTokens bool
}

// Encode tokenizes text with the post-processor's special tokens added (like the Hugging Face
// default add_special_tokens=True) and without parsing special tokens out of the text: text
// such as "<|im_end|>" or "</s>" in user input is encoded as ordinary characters, never as
// the control token (see EncodeOptions.ParseSpecialTokens). Use EncodeWith for other choices.
func (t *Tokenizer) Encode(text string) ([]int, error) {
	return t.EncodeWith(text, EncodeOptions{AddSpecialTokens: true})
}

// EncodeWith tokenizes text with explicit options. It fails only on text that is not valid
// UTF-8 or when the tokenizer file is inconsistent (an unknown-token that is missing from
// the vocabulary).
func (t *Tokenizer) EncodeWith(text string, opts EncodeOptions) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	ids := make([]int, 0, len(text)/4+4)
	skipSpecial := !opts.ParseSpecialTokens
	budget := newGrowthBudget(len(text))
	emit := func(p piece) error {
		if err := budget.charge(len(p.text), "pre-tokenizer"); err != nil {
			return err
		}
		var err error
		ids, err = t.model.tokenize(p.text, t.lazyBytes, ids)
		return err
	}
	var subs []segment
	for _, seg := range t.added.split(text, true, t.added.raw, skipSpecial, nil) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		s := seg.text
		if t.normalizer != nil {
			var err error
			if s, err = normalizeText(t.normalizer, s, budget); err != nil {
				return nil, err
			}
		}
		subs = t.added.split(s, seg.atStart, t.added.norm, skipSpecial, subs[:0])
		for _, sub := range subs {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
				continue
			}
			p := piece{text: sub.text, atStart: sub.atStart, budget: budget}
			var err error
			if t.pre != nil {
				err = t.pre.split(p, emit)
			} else {
				err = emit(p)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if opts.AddSpecialTokens && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids, nil
}

// Decode turns ids back into text through the tokenizer's decoder. With skipSpecial, special
// tokens (BOS, EOS, "<|im_end|>", ...) are left out. Ids outside the vocabulary are ignored,
// as the Hugging Face library ignores them. Without a decoder the tokens are joined with
// spaces.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	s := t.NewDecodeStream(skipSpecial)
	var sb strings.Builder
	sb.WriteString(s.Push(ids...))
	sb.WriteString(s.Flush())
	return sb.String()
}

// tokenOf returns the token string of id, or false when id is unknown or, with skipSpecial,
// special.
func (t *Tokenizer) tokenOf(id int, skipSpecial bool) (string, bool) {
	if id < 0 || id >= len(t.idToToken) || !t.hasToken[id] {
		return "", false
	}
	if skipSpecial && t.special[id] {
		return "", false
	}
	return t.decodeToken[id], true
}

// VocabSize returns one more than the largest token id, counting added tokens: the number of
// rows an embedding for this tokenizer needs.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// TokenToID returns the id of a token string (an added token or a vocabulary entry).
func (t *Tokenizer) TokenToID(token string) (int, bool) {
	if id, ok := t.added.byContent[token]; ok {
		return id, true
	}
	id, ok := t.model.vocab[token]
	return int(id), ok
}

// IDToToken returns the token string of an id (for an added token, its content).
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) || !t.hasToken[id] {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is a special token, one that Decode with skipSpecial leaves out.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// AddedTokens returns the added tokens of tokenizer.json, in file order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added.tokens...)
}

// Config returns what was read from tokenizer_config.json (the zero Config when there was
// none). The result is a copy.
func (t *Tokenizer) Config() Config {
	c := t.config
	c.AdditionalSpecialTokens = append([]string(nil), c.AdditionalSpecialTokens...)
	c.ChatTemplates = maps.Clone(c.ChatTemplates)
	return c
}

// BOSTokenID returns the id of the configured beginning-of-sequence token.
func (t *Tokenizer) BOSTokenID() (int, bool) { return t.roleID(t.config.BOSToken) }

// EOSTokenID returns the id of the configured end-of-sequence token (for chat models, the
// end-of-turn token such as "<|im_end|>").
func (t *Tokenizer) EOSTokenID() (int, bool) { return t.roleID(t.config.EOSToken) }

func (t *Tokenizer) roleID(tok string) (int, bool) {
	if tok == "" {
		return 0, false
	}
	return t.TokenToID(tok)
}
