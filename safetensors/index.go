package safetensors

import (
	"bytes"
	"encoding/json"
	"path/filepath"
)

// shardIndex is the content of a sharded checkpoint's index file, as transformers writes
// it: {"metadata": {...}, "weight_map": {"tensor name": "shard file name", ...}}.
type shardIndex struct {
	metadata  map[string]string // values that are not strings kept as their JSON text
	weightMap map[string]string // tensor name → shard file, relative to the index's folder
}

// parseIndex parses and checks the index file at path, whose content is data.
func parseIndex(data []byte, path string) (*shardIndex, error) {
	p := newJSONParser(data, path)
	idx := &shardIndex{}
	present, err := p.object("", "index", func(key string) error {
		var err error
		switch key {
		case "metadata":
			idx.metadata, err = parseIndexMetadata(p)
		case "weight_map":
			idx.weightMap, err = parseWeightMap(p)
		default:
			_, err = p.raw("") // other keys are ignored, as transformers does
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case !present:
		return nil, formatErrorf(path, "", "index is a JSON null, not an object")
	case idx.weightMap == nil:
		return nil, formatErrorf(path, "", `index has no "weight_map"`)
	}
	if err := p.end(); err != nil {
		return nil, err
	}
	return idx, nil
}

// parseIndexMetadata reads the index's "metadata" object. Its values are not all strings
// (transformers writes "total_size" as a number); those that are not are kept as their
// compact JSON text, so that "total_size" reads "45376".
func parseIndexMetadata(p *jsonParser) (map[string]string, error) {
	metadata := make(map[string]string)
	present, err := p.object("", "metadata", func(key string) error {
		raw, err := p.raw("")
		if err != nil {
			return err
		}
		var text string
		if json.Unmarshal(raw, &text) != nil { // not a string
			var compact bytes.Buffer
			if err := json.Compact(&compact, raw); err != nil {
				return &FormatError{Path: p.path, Msg: "invalid JSON", Err: err}
			}
			text = compact.String()
		}
		metadata[key] = text
		return nil
	})
	if !present {
		return nil, err
	}
	return metadata, err
}

// parseWeightMap reads the "weight_map" object, rejecting shard names that would reach
// outside the index's folder.
func parseWeightMap(p *jsonParser) (map[string]string, error) {
	weightMap := make(map[string]string)
	present, err := p.object("", "weight_map", func(name string) error {
		file, err := p.string(name, "weight_map entry")
		if err != nil {
			return err
		}
		local := filepath.FromSlash(file)
		if !filepath.IsLocal(local) {
			return formatErrorf(p.path, name, "shard %q is not a file inside the index's folder", file)
		}
		weightMap[name] = filepath.Clean(local)
		return nil
	})
	if err == nil && !present {
		return nil, formatErrorf(p.path, "", "weight_map is a JSON null, not an object")
	}
	return weightMap, err
}
