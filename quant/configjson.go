package quant

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blockdiff/blockdiff/model"
)

// configFields returns the fields of a config.json describing cfg, for models that have
// none (such as [model.NewRandom] ones): model.ParseConfig reads them back to cfg.
func configFields(cfg model.Config) (map[string]any, error) {
	data, err := cfg.JSON()
	if err != nil {
		return nil, fmt.Errorf("quant: describing the model in a config.json: %w", err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	return fields, nil
}

// baseConfig returns the config.json fields a saved checkpoint starts from: those of the
// file at source (a config.json or a folder holding one), or generated from cfg when
// source is empty.
func baseConfig(source string, cfg model.Config) (map[string]json.RawMessage, error) {
	var data []byte
	if source == "" {
		fields, err := configFields(cfg)
		if err != nil {
			return nil, err
		}
		if data, err = json.Marshal(fields); err != nil {
			return nil, fmt.Errorf("quant: encoding config: %w", err)
		}
	} else {
		if info, err := os.Stat(source); err == nil && info.IsDir() {
			source = filepath.Join(source, "config.json")
		}
		var err error
		if data, err = os.ReadFile(source); err != nil {
			return nil, fmt.Errorf("quant: reading the source config: %w", err)
		}
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("quant: source config %s: %w", source, err)
	}
	return out, nil
}
