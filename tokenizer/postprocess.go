package tokenizer

import (
	"fmt"
)

// postProcessor adds special tokens around an encoded sequence (tokenizer.json
// "post_processor"). It only runs when special tokens are requested.
type postProcessor interface {
	process(ids []int) []int
	// specialIDs appends the ids the post-processor may add.
	specialIDs(dst []int) []int
}

// parsePostProcessor builds a post-processor from its JSON description; null gives nil.
func parsePostProcessor(v any) (postProcessor, error) {
	o, err := asObject(v)
	if err != nil {
		return nil, fmt.Errorf("post-processor: %w", err)
	}
	if o == nil {
		return nil, nil
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
		var ids [2]int
		for i, key := range []string{"sep", "cls"} {
			pair, err := o.list(key)
			if err != nil || len(pair) != 2 {
				return nil, wrap(fmt.Errorf("field %q: want [token, id]", key))
			}
			if _, ok := pair[0].(string); !ok {
				return nil, wrap(fmt.Errorf("field %q: token: want a string, got %s", key, jsonKind(pair[0])))
			}
			if ids[i], err = jsonInt(pair[1]); err != nil {
				return nil, wrap(fmt.Errorf("field %q: id: %w", key, err))
			}
		}
		sep, cls := ids[0], ids[1]
		return templateProcessor{{ids: []int{cls}}, {sequence: true}, {ids: []int{sep}}}, nil
	case "":
		return nil, fmt.Errorf("post-processor without a type")
	}
	return nil, fmt.Errorf("%w: post-processor type %q", ErrUnsupported, typ)
}

type seqProcessor []postProcessor

func (s seqProcessor) specialIDs(dst []int) []int {
	for _, p := range s {
		dst = p.specialIDs(dst)
	}
	return dst
}

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

func (t templateProcessor) specialIDs(dst []int) []int {
	for _, it := range t {
		dst = append(dst, it.ids...)
	}
	return dst
}

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
	specials, err := asObject(o["special_tokens"])
	if err != nil {
		return nil, wrap(fmt.Errorf("field \"special_tokens\": %w", err))
	}
	items, err := o.list("single")
	if err != nil {
		return nil, wrap(err)
	}
	var t templateProcessor
	for i, raw := range items {
		it, err := asObject(raw)
		if err != nil {
			return nil, wrap(fmt.Errorf("template item %d: %w", i, err))
		}
		spec, err := asObject(it["SpecialToken"])
		if err != nil {
			return nil, wrap(fmt.Errorf("template item %d: field \"SpecialToken\": %w", i, err))
		}
		seq, err := asObject(it["Sequence"])
		if err != nil {
			return nil, wrap(fmt.Errorf("template item %d: field \"Sequence\": %w", i, err))
		}
		switch {
		case spec != nil:
			name, err := spec.str("id", "")
			if err != nil {
				return nil, wrap(fmt.Errorf("template item %d: %w", i, err))
			}
			sp, err := asObject(specials[name])
			if err != nil {
				return nil, wrap(fmt.Errorf("special token %q: %w", name, err))
			}
			if sp == nil {
				return nil, wrap(fmt.Errorf("special token %q is used by the template but not defined", name))
			}
			list, err := sp.list("ids")
			if err != nil {
				return nil, wrap(fmt.Errorf("special token %q: %w", name, err))
			}
			ids := make([]int, len(list))
			for j, v := range list {
				if ids[j], err = jsonInt(v); err != nil {
					return nil, wrap(fmt.Errorf("special token %q: field \"ids\": %w", name, err))
				}
			}
			t = append(t, templateItem{ids: ids})
		case seq != nil:
			name, err := seq.str("id", "")
			if err != nil {
				return nil, wrap(fmt.Errorf("template item %d: %w", i, err))
			}
			if name != "A" {
				return nil, wrap(fmt.Errorf("single-sequence template refers to sequence %q", name))
			}
			t = append(t, templateItem{sequence: true})
		default:
			return nil, wrap(fmt.Errorf("template item %d is neither SpecialToken nor Sequence", i))
		}
	}
	return t, nil
}
