package diffusion

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPresetsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadPresets(dir)
	require.NoError(t, err)
	require.Equal(t, BuiltinPresets(), p, "no file: the built-in presets")

	path := filepath.Join(dir, GenerationConfigFile)
	require.NoError(t, os.WriteFile(path, []byte(`{"bos_token_id": 1, "max_new_tokens": 64}`), 0o644))
	p, err = LoadPresets(dir)
	require.NoError(t, err)
	require.Equal(t, BuiltinPresets(), p, "no block_diffusion object: the built-in presets")

	chosen := Presets{"quality": {BlockSize: 4, Threshold: 0.8, MinReveal: 1}, "speed": {BlockSize: 4, Threshold: 0.5, MinReveal: 2}}
	require.NoError(t, WritePresets(dir, chosen))
	p, err = LoadPresets(dir)
	require.NoError(t, err)
	require.Equal(t, chosen, p)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), `"bos_token_id": 1`, "other fields kept")
	c, err := p.Config("speed")
	require.NoError(t, err)
	want := DefaultConfig()
	want.Threshold, want.MinReveal = 0.5, 2
	require.Equal(t, want, c)
	_, err = p.Config("fast")
	require.ErrorContains(t, err, `unknown preset "fast"`)
}

func TestPresetsRejectBadFiles(t *testing.T) {
	for name, body := range map[string]string{
		"not json":         `{`,
		"missing speed":    `{"block_diffusion": {"presets": {"quality": {"block_size": 4, "threshold": 0.9, "min_reveal": 1}}}}`,
		"threshold over 1": `{"block_diffusion": {"presets": {"quality": {"block_size": 4, "threshold": 2, "min_reveal": 1}, "speed": {"block_size": 4, "threshold": 0.7, "min_reveal": 2}}}}`,
		"zero block":       `{"block_diffusion": {"presets": {"quality": {"block_size": 0, "threshold": 0.9, "min_reveal": 1}, "speed": {"block_size": 4, "threshold": 0.7, "min_reveal": 2}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, GenerationConfigFile), []byte(body), 0o644))
			_, err := LoadPresets(dir)
			require.Error(t, err)
			require.Contains(t, err.Error(), GenerationConfigFile)
		})
	}
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, GenerationConfigFile), 0o755))
	_, err := LoadPresets(dir)
	require.ErrorContains(t, err, "not a regular file")
}
