package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Config holds what this package uses from tokenizer_config.json, the transformers-level
// configuration that sits beside tokenizer.json.
type Config struct {
	// Special tokens by role, as written in the file; "" when not set.
	BOSToken, EOSToken, UnkToken, PadToken, SepToken, ClsToken, MaskToken string
	// AdditionalSpecialTokens lists additional_special_tokens.
	AdditionalSpecialTokens []string
	// AddBOSToken and AddEOSToken echo add_bos_token and add_eos_token (nil when absent). They
	// are informational: Encode follows the post-processor of tokenizer.json, which is what
	// the Hugging Face tokenizers library does.
	AddBOSToken, AddEOSToken *bool
	// ChatTemplate is the default chat template ("" when there is none).
	ChatTemplate string
	// ChatTemplates holds every named template, the default one under "default".
	ChatTemplates map[string]string
	// CleanUpTokenizationSpaces echoes clean_up_tokenization_spaces. Decode does not apply
	// it, as the tokenizers library does not.
	CleanUpTokenizationSpaces bool
	// TokenizerClass echoes tokenizer_class.
	TokenizerClass string
}

// parseConfig reads tokenizer_config.json.
func parseConfig(data []byte) (Config, error) {
	var c Config
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	fields := []struct {
		key string
		dst *string
	}{
		{"bos_token", &c.BOSToken}, {"eos_token", &c.EOSToken}, {"unk_token", &c.UnkToken},
		{"pad_token", &c.PadToken}, {"sep_token", &c.SepToken}, {"cls_token", &c.ClsToken},
		{"mask_token", &c.MaskToken},
	}
	for _, f := range fields {
		s, err := tokenContent(o[f.key])
		if err != nil {
			return c, fmt.Errorf("tokenizer_config.json: field %q: %w", f.key, err)
		}
		*f.dst = s
	}
	if raw := o["additional_special_tokens"]; !isNull(raw) {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return c, fmt.Errorf("tokenizer_config.json: field \"additional_special_tokens\": %w", err)
		}
		for _, it := range list {
			s, err := tokenContent(it)
			if err != nil {
				return c, fmt.Errorf("tokenizer_config.json: field \"additional_special_tokens\": %w", err)
			}
			c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s)
		}
	}
	for _, f := range []struct {
		key string
		dst **bool
	}{{"add_bos_token", &c.AddBOSToken}, {"add_eos_token", &c.AddEOSToken}} {
		if o.has(f.key) {
			b, err := o.boolean(f.key, false)
			if err != nil {
				return c, fmt.Errorf("tokenizer_config.json: %w", err)
			}
			*f.dst = &b
		}
	}
	var err error
	if c.CleanUpTokenizationSpaces, err = o.boolean("clean_up_tokenization_spaces", false); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if c.TokenizerClass, err = o.str("tokenizer_class", ""); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if raw := o["chat_template"]; !isNull(raw) {
		c.ChatTemplates = map[string]string{}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			c.ChatTemplates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &named); err != nil {
				return c, fmt.Errorf("tokenizer_config.json: field \"chat_template\": want a string or a list of {name, template}: %w", err)
			}
			for _, n := range named {
				c.ChatTemplates[n.Name] = n.Template
			}
		}
		c.ChatTemplate = c.ChatTemplates["default"]
		if c.ChatTemplate == "" && len(c.ChatTemplates) == 1 {
			for _, t := range c.ChatTemplates {
				c.ChatTemplate = t
			}
		}
	}
	return c, nil
}

// tokenContent reads a special token written as a string, as {"content": ...}, or as null.
func tokenContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var t struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", fmt.Errorf("want a string or an object with \"content\": %w", err)
	}
	return t.Content, nil
}

// specialTokenVars returns the template variables transformers passes for the special tokens
// that are set (bos_token, eos_token, ...).
func (c Config) specialTokenVars() map[string]any {
	vars := map[string]any{}
	for k, v := range map[string]string{
		"bos_token": c.BOSToken, "eos_token": c.EOSToken, "unk_token": c.UnkToken,
		"pad_token": c.PadToken, "sep_token": c.SepToken, "cls_token": c.ClsToken,
		"mask_token": c.MaskToken,
	} {
		if v != "" {
			vars[k] = v
		}
	}
	if len(c.AdditionalSpecialTokens) > 0 {
		list := make([]any, len(c.AdditionalSpecialTokens))
		for i, s := range c.AdditionalSpecialTokens {
			list[i] = s
		}
		vars["additional_special_tokens"] = list
	}
	return vars
}

// templateNames lists the named chat templates in order.
func (c Config) templateNames() []string {
	names := make([]string, 0, len(c.ChatTemplates))
	for n := range c.ChatTemplates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
