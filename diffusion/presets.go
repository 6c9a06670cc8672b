package diffusion

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// GenerationConfigFile is the file of a checkpoint folder (Hugging Face's name) whose
// "block_diffusion" object holds the decoder presets chosen for that checkpoint from data.
const GenerationConfigFile = "generation_config.json"

// maxGenerationConfigBytes bounds what is read of a folder's generation config.
const maxGenerationConfigBytes = 1 << 20

// PresetSettings are the settings a preset fixes; the rest of a [Config] keeps its defaults.
type PresetSettings struct {
	BlockSize int     `json:"block_size"`
	Threshold float64 `json:"threshold"`
	MinReveal int     `json:"min_reveal"`
}

// Presets are a checkpoint's named decoder settings, "quality" and "speed" at least.
type Presets map[string]PresetSettings

// BuiltinPresets are [Quality] and [Speed], for checkpoints that name none.
func BuiltinPresets() Presets {
	return Presets{"quality": settingsOf(Quality), "speed": settingsOf(Speed)}
}

func settingsOf(c Config) PresetSettings {
	return PresetSettings{BlockSize: c.BlockSize, Threshold: c.Threshold, MinReveal: c.MinReveal}
}

// Config returns the preset named name as a full configuration: [DefaultConfig] with the
// preset's settings.
func (p Presets) Config(name string) (Config, error) {
	s, ok := p[name]
	if !ok {
		names := make([]string, 0, len(p))
		for n := range p {
			names = append(names, n)
		}
		slices.Sort(names)
		return Config{}, fmt.Errorf("diffusion: unknown preset %q (this checkpoint has %v)", name, names)
	}
	c := DefaultConfig()
	c.BlockSize, c.Threshold, c.MinReveal = s.BlockSize, s.Threshold, s.MinReveal
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("diffusion: preset %q: %w", name, err)
	}
	return c, nil
}

type generationConfig struct {
	BlockDiffusion *struct {
		Presets Presets `json:"presets"`
	} `json:"block_diffusion"`
}

// LoadPresets reads the presets of a checkpoint folder from its [GenerationConfigFile].
// A folder without the file, or whose file has no "block_diffusion" object, has the
// [BuiltinPresets]. A file that names presets must hold "quality" and "speed", each valid.
func LoadPresets(dir string) (Presets, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return BuiltinPresets(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("diffusion: %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxGenerationConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("diffusion: reading %s: %w", path, err)
	}
	if len(data) > maxGenerationConfigBytes {
		return nil, fmt.Errorf("diffusion: %s is larger than %d bytes", path, maxGenerationConfigBytes)
	}
	var gc generationConfig
	if err := json.Unmarshal(data, &gc); err != nil {
		return nil, fmt.Errorf("diffusion: %s: %w", path, err)
	}
	if gc.BlockDiffusion == nil {
		return BuiltinPresets(), nil
	}
	p := gc.BlockDiffusion.Presets
	for _, name := range []string{"quality", "speed"} {
		if _, ok := p[name]; !ok {
			return nil, fmt.Errorf("diffusion: %s: block_diffusion.presets has no %q", path, name)
		}
	}
	for name := range p {
		if _, err := p.Config(name); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, path)
		}
	}
	return p, nil
}

// WritePresets records presets in a checkpoint folder's [GenerationConfigFile], keeping the
// file's other fields.
func WritePresets(dir string, p Presets) error {
	for name := range p {
		if _, err := p.Config(name); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, GenerationConfigFile)
	fields := map[string]json.RawMessage{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &fields); err != nil {
			return fmt.Errorf("diffusion: %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("diffusion: %w", err)
	}
	bd, err := json.Marshal(map[string]Presets{"presets": p})
	if err != nil {
		return err
	}
	fields["block_diffusion"] = bd
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}
