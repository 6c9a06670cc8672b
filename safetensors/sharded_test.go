package safetensors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

// writeShard writes a shard holding one F32 tensor of value i+1 per name.
func writeShard(t *testing.T, dir, file string, names ...string) {
	t.Helper()
	var w Writer
	require.NoError(t, w.SetMetadata("format", "pt"))
	for i, name := range names {
		require.NoError(t, w.AddFloat32s(name, F32, []int{2}, []float32{float32(i + 1), -float32(i + 1)}))
	}
	require.NoError(t, w.WriteFile(filepath.Join(dir, file)))
}

func writeIndex(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, IndexFileName)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// shardedDir returns a folder with two shards, a.safetensors holding "x" and "y" and
// b.safetensors holding "z".
func shardedDir(t *testing.T) string {
	dir := t.TempDir()
	writeShard(t, dir, "a.safetensors", "x", "y")
	writeShard(t, dir, "b.safetensors", "z")
	return dir
}

func TestOpenSharded(t *testing.T) {
	dir := shardedDir(t)
	writeIndex(t, dir, `{"metadata":{"total_size":24,"note":"n","nested":{"a": [1, 2]}},
		"weight_map":{"z":"b.safetensors","x":"a.safetensors","y":"./a.safetensors"}}`)
	ckpt, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	require.IsType(t, &Sharded{}, ckpt)
	require.Equal(t, filepath.Join(dir, IndexFileName), ckpt.(*Sharded).Path())
	require.Equal(t, map[string]string{"total_size": "24", "note": "n", "nested": `{"a":[1,2]}`}, ckpt.Metadata())

	var names []string
	for _, info := range ckpt.Tensors() {
		names = append(names, info.Name)
	}
	require.Equal(t, []string{"x", "y", "z"}, names, "shard by shard, in file name order")
	z, err := ckpt.Float32s("z")
	require.NoError(t, err)
	require.Equal(t, []float32{1, -1}, z)
	info, ok := ckpt.Lookup("y")
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, "a.safetensors"), info.Path)
	tensor, err := ckpt.TensorAs("y", dtypes.Float64)
	require.NoError(t, err)
	require.Equal(t, []float64{2, -2}, flatFloat64s(t, tensor))
	_, err = ckpt.Bytes("nope")
	require.ErrorContains(t, err, `no tensor named "nope"`)

	require.NoError(t, ckpt.Close())
	_, err = ckpt.Bytes("x")
	require.ErrorIs(t, err, fs.ErrClosed)
	require.ErrorIs(t, ckpt.Close(), fs.ErrClosed)
}

func TestOpenCheckpointLayouts(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenCheckpoint(dir)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "neither model.safetensors nor model.safetensors.index.json found")

	writeShard(t, dir, SingleFileName, "w")
	ckpt, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	require.IsType(t, &File{}, ckpt)
	require.NoError(t, ckpt.Close())

	// A broken single file is reported, not passed over for the index.
	require.NoError(t, os.WriteFile(filepath.Join(dir, SingleFileName), []byte("junk"), 0o644))
	writeShard(t, dir, "a.safetensors", "w")
	writeIndex(t, dir, `{"weight_map":{"w":"a.safetensors"}}`)
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "too short")
}

// TestOpenShardedErrors checks one inconsistency between index and shards per case.
func TestOpenShardedErrors(t *testing.T) {
	tests := []struct {
		name  string
		index string
		want  []string
		is    error
	}{
		{"missing shard file", `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","q":"c.safetensors"}}`,
			[]string{IndexFileName, `tensor "q": shard "c.safetensors" is missing`}, fs.ErrNotExist},
		{"tensor missing from its shard", `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","q":"b.safetensors"}}`,
			[]string{IndexFileName, `tensor "q": not found in its shard "b.safetensors"`}, nil},
		{"tensor absent from the index", `{"weight_map":{"x":"a.safetensors","z":"b.safetensors"}}`,
			[]string{"a.safetensors", `tensor "y": present in the shard but absent from index`}, nil},
		{"tensor in another shard than the index says", `{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}}`,
			[]string{"a.safetensors", `tensor "y": present in the shard, but index`, `assigns it to shard "b.safetensors"`}, nil},
		{"shard outside the folder", `{"weight_map":{"x":"../a.safetensors"}}`,
			[]string{`tensor "x": shard "../a.safetensors" is not a file inside the index's folder`}, nil},
		{"absolute shard path", `{"weight_map":{"x":"/etc/passwd"}}`, []string{`is not a file inside the index's folder`}, nil},
		{"duplicate weight_map key", `{"weight_map":{"x":"a.safetensors","x":"a.safetensors"}}`, []string{`weight_map: key "x" appears twice`}, nil},
		{"no weight_map", `{"metadata":{}}`, []string{`index has no "weight_map"`}, nil},
		{"weight_map null", `{"weight_map":null}`, []string{"weight_map is a JSON null, not an object"}, nil},
		{"shard name not a string", `{"weight_map":{"x":3}}`, []string{`tensor "x": weight_map entry is a JSON number, not a string`}, nil},
		{"invalid JSON", `{"weight_map":{`, []string{"invalid JSON"}, nil},
		{"index not an object", `null`, []string{"index is a JSON null, not an object"}, nil},
		{"trailing data", `{"weight_map":{}} x`, []string{"unexpected data after the JSON object"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shardedDir(t)
			indexPath := writeIndex(t, dir, tt.index)
			_, err := OpenSharded(indexPath)
			require.Error(t, err)
			for _, want := range tt.want {
				require.ErrorContains(t, err, want)
			}
			var formatErr *FormatError
			require.True(t, errors.As(err, &formatErr), "want a *FormatError, got %T: %v", err, err)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
		})
	}
}

// TestFileAfterClose checks that a closed file refuses reads instead of touching unmapped
// memory.
func TestFileAfterClose(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "m.safetensors", "w")
	f, err := Open(filepath.Join(dir, "m.safetensors"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "m.safetensors"), f.Path())
	require.NoError(t, f.Close())
	_, err = f.Bytes("w")
	require.ErrorIs(t, err, fs.ErrClosed)
	_, err = f.Float32s("w")
	require.ErrorIs(t, err, fs.ErrClosed)
	_, err = f.Tensor("w")
	require.ErrorIs(t, err, fs.ErrClosed)
	require.ErrorIs(t, f.Close(), fs.ErrClosed)
}

// A tensor held by two shards is an error naming the shard the index does not assign it
// to, whichever the index names.
func TestTensorInTwoShards(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "a.safetensors", "x", "y")
	writeShard(t, dir, "b.safetensors", "y", "z")
	for listed, other := range map[string]string{"a.safetensors": "b.safetensors", "b.safetensors": "a.safetensors"} {
		writeIndex(t, dir, `{"weight_map":{"x":"a.safetensors","y":"`+listed+`","z":"b.safetensors"}}`)
		_, err := OpenCheckpoint(dir)
		require.ErrorContains(t, err, filepath.Join(dir, other)+`: tensor "y": present in the shard, but index`)
	}
}
