package tokenizer

import (
	"errors"
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
	var top any
	if err := decodeJSON(data, &top); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	o, err := asObject(top)
	if err == nil && o == nil {
		err = errors.New("want an object, got null")
	}
	if err != nil {
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
	if o.has("additional_special_tokens") {
		list, err := o.list("additional_special_tokens")
		if err != nil {
			return c, fmt.Errorf("tokenizer_config.json: %w", err)
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
	if c.CleanUpTokenizationSpaces, err = o.boolean("clean_up_tokenization_spaces", false); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if c.TokenizerClass, err = o.str("tokenizer_class", ""); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if v := o["chat_template"]; v != nil {
		c.ChatTemplates = map[string]string{}
		switch v := v.(type) {
		case string:
			c.ChatTemplates["default"] = v
		case []any:
			for i, it := range v {
				n, err := asObject(it)
				if err == nil && n == nil {
					err = errors.New("want an object, got null")
				}
				var name, tmpl string
				if err == nil {
					name, err = n.str("name", "")
				}
				if err == nil {
					tmpl, err = n.str("template", "")
				}
				if err != nil {
					return c, fmt.Errorf("tokenizer_config.json: field \"chat_template\": entry %d: %w", i, err)
				}
				c.ChatTemplates[name] = tmpl
			}
		default:
			return c, fmt.Errorf("tokenizer_config.json: field \"chat_template\": want a string or a list of {name, template}, got %s", jsonKind(v))
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
func tokenContent(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case map[string]any:
		return object(v).str("content", "")
	}
	return "", fmt.Errorf("want a string or an object with \"content\", got %s", jsonKind(v))
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
