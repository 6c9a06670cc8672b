package backend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSelectPrecedence(t *testing.T) {
	t.Setenv(PluginEnv, "/opt/plugin.so")
	t.Setenv(GoMLXEnv, "go")
	require.Equal(t, "bdxla:/opt/plugin.so,preallocate=true", Select().Config)

	t.Setenv(PluginEnv, "")
	require.Equal(t, "go", Select().Config)
}

func TestSelectFindsTheCUDAPlugin(t *testing.T) {
	t.Setenv(PluginEnv, "")
	t.Setenv(GoMLXEnv, "")
	venv := t.TempDir()
	site := filepath.Join(venv, "lib", "python3.12", "site-packages")
	plugin := filepath.Join(site, cudaPluginRelPath)
	require.NoError(t, os.MkdirAll(filepath.Dir(plugin), 0o755))
	require.NoError(t, os.WriteFile(plugin, nil, 0o644))
	t.Setenv("VIRTUAL_ENV", venv)

	defer func(f func() bool) { devicePresent = f }(devicePresent)
	devicePresent = func() bool { return true }
	c := Select()
	require.Equal(t, "bdxla:"+plugin+",preallocate=true", c.Config)
	require.True(t, c.IsXLA())
	require.Contains(t, c.Reason, site)

	devicePresent = func() bool { return false }
	c = Select()
	require.Equal(t, GoConfig, c.Config)
	require.False(t, c.IsXLA())
}

func TestNewWithConfigRejectsUnknownBackends(t *testing.T) {
	_, err := NewWithConfig("nonesuch")
	require.Error(t, err)
}

func TestForDevices(t *testing.T) {
	ours := Choice{Config: "bdxla:/opt/plugin.so,preallocate=true,notf32,nokernels", Reason: "found"}
	require.Equal(t, ours, ForDevices(ours, 1))
	require.Equal(t, ours, ForDevices(ours, 0))
	c := ForDevices(ours, 2)
	require.Equal(t, "xla:/opt/plugin.so,preallocate=true,tf32=false", c.Config)
	require.True(t, c.IsXLA())
	require.Contains(t, c.Reason, "2 devices")
	for _, other := range []Choice{{Config: GoConfig}, {Config: "xla:cuda"}} {
		require.Equal(t, other, ForDevices(other, 4), "not ours: as it is")
	}
}
