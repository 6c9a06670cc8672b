package safetensors

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// WriteShards splits the tensors into files no larger than the limit that OpenSharded
// reads back whole; a tensor too large for any shard is an error. Size is the size of
// the single file.
func TestWriteShards(t *testing.T) {
	var w Writer
	require.NoError(t, w.SetMetadata("format", "pt"))
	want := map[string][]float32{}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		values := make([]float32, 40*(i+1))
		for j := range values {
			values[j] = float32(i*1000 + j)
		}
		want[name] = values
		require.NoError(t, w.AddFloat32s(name, F32, []int{len(values)}, values))
	}
	dir := t.TempDir()
	single := filepath.Join(dir, "single.safetensors")
	require.NoError(t, w.WriteFile(single))
	info, err := os.Stat(single)
	require.NoError(t, err)
	require.Equal(t, info.Size(), w.Size())

	const limit = 1000
	files, err := w.WriteShards(dir, "model", limit)
	require.NoError(t, err)
	require.Greater(t, len(files), 2)
	require.Equal(t, filepath.Join(dir, IndexFileName), files[len(files)-1])
	for _, f := range files[:len(files)-1] {
		info, err := os.Stat(f)
		require.NoError(t, err)
		require.LessOrEqual(t, info.Size(), int64(limit), f)
	}
	ckpt, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ckpt.Close()
	require.Len(t, ckpt.Tensors(), len(want))
	for name, values := range want {
		got, err := ckpt.Float32s(name)
		require.NoError(t, err)
		require.Equal(t, values, got, name)
	}
	require.Equal(t, "2400", ckpt.Metadata()["total_size"])

	_, err = w.WriteShards(t.TempDir(), "model", 500)
	require.ErrorContains(t, err, `tensor "c" takes 584 bytes`)
}
