package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds special tokens around an encoded sequence (tokenizer.json
// "post_processor"). It only runs when special tokens are requested.
type postProcessor interface {
	process(ids []int) []int
}

// parsePostProcessor builds a post-processor from its JSON description; null gives nil.
func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	o, err := parseObject(raw)
	if err != nil || o == nil {
		return nil, err
	}
	typ := o.typeName()
	wrap := func(err error) error { return fmt.Errorf("post-processor %s: %w", typ, err) }
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, "processors", parsePostProcessor, wrap)
		return seqProcessor(seq), err
	case "TemplateProcessing":
		return parseTemplateProcessing(o)
	case "ByteLevel":
		// Only adjusts offsets, which this package does not report.
		return nil, nil
	case "RobertaProcessing", "BertProcessing":
		var sep, cls struct {
			tok string
			id  int
		}
		for _, f := range []struct {
			key string
			dst *struct {
				tok string
				id  int
			}
		}{{"sep", &sep}, {"cls", &cls}} {
			var pair []json.RawMessage
			if err := json.Unmarshal(o[f.key], &pair); err != nil || len(pair) != 2 {
				return nil, wrap(fmt.Errorf("field %q: want [token, id]", f.key))
			}
			if err := json.Unmarshal(pair[0], &f.dst.tok); err != nil {
				return nil, wrap(fmt.Errorf("field %q: %w", f.key, err))
			}
			if err := json.Unmarshal(pair[1], &f.dst.id); err != nil {
				return nil, wrap(fmt.Errorf("field %q: %w", f.key, err))
			}
		}
		return templateProcessor{{ids: []int{cls.id}}, {sequence: true}, {ids: []int{sep.id}}}, nil
	case "":
		return nil, fmt.Errorf("post-processor without a type")
	}
	return nil, fmt.Errorf("%w: post-processor type %q", ErrUnsupported, typ)
}

type seqProcessor []postProcessor

func (s seqProcessor) process(ids []int) []int {
	for _, p := range s {
		ids = p.process(ids)
	}
	return ids
}

// templateItem is one element of a single-sequence template: fixed special-token ids or the
// encoded sequence itself.
type templateItem struct {
	ids      []int
	sequence bool
}

// templateProcessor is TemplateProcessing's "single" template, e.g. "<s> $A".
type templateProcessor []templateItem

func (t templateProcessor) process(ids []int) []int {
	out := make([]int, 0, len(ids)+4)
	for _, it := range t {
		if it.sequence {
			out = append(out, ids...)
		} else {
			out = append(out, it.ids...)
		}
	}
	return out
}

func parseTemplateProcessing(o object) (postProcessor, error) {
	wrap := func(err error) error { return fmt.Errorf("post-processor TemplateProcessing: %w", err) }
	var specials map[string]struct {
		ID  string `json:"id"`
		IDs []int  `json:"ids"`
	}
	if raw, ok := o["special_tokens"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &specials); err != nil {
			return nil, wrap(fmt.Errorf("field \"special_tokens\": %w", err))
		}
	}
	items, err := o.list("single")
	if err != nil {
		return nil, wrap(err)
	}
	var t templateProcessor
	for _, raw := range items {
		var it struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, wrap(fmt.Errorf("template item %s: %w", raw, err))
		}
		switch {
		case it.SpecialToken != nil:
			sp, ok := specials[it.SpecialToken.ID]
			if !ok {
				return nil, wrap(fmt.Errorf("special token %q is used by the template but not defined", it.SpecialToken.ID))
			}
			t = append(t, templateItem{ids: sp.IDs})
		case it.Sequence != nil:
			if it.Sequence.ID != "A" {
				return nil, wrap(fmt.Errorf("single-sequence template refers to sequence %q", it.Sequence.ID))
			}
			t = append(t, templateItem{sequence: true})
		default:
			return nil, wrap(fmt.Errorf("template item %s is neither SpecialToken nor Sequence", raw))
		}
	}
	return t, nil
}
