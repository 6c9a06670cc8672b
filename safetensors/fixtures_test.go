package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

// torchDTypes maps the torch dtype names in the fixtures' JSON to safetensors dtypes.
var torchDTypes = map[string]DType{
	"torch.float64":       F64,
	"torch.float32":       F32,
	"torch.float16":       F16,
	"torch.bfloat16":      BF16,
	"torch.float8_e4m3fn": F8E4M3,
	"torch.float8_e5m2":   F8E5M2,
	"torch.int64":         I64,
	"torch.int32":         I32,
	"torch.int16":         I16,
	"torch.int8":          I8,
	"torch.uint8":         U8,
	"torch.bool":          Bool,
}

// expectedTensor is one entry of a fixture's JSON description.
type expectedTensor struct {
	DType  string            `json:"dtype"`
	Shape  []int             `json:"shape"`
	Values []json.RawMessage `json:"values"`
}

// pythonSpecials matches the bare NaN and Infinity tokens Python's json module writes,
// which are not JSON.
var pythonSpecials = regexp.MustCompile(`-?\bInfinity\b|\bNaN\b`)

// readExpected reads a fixture's JSON description of its tensors.
func readExpected(t *testing.T, path string) map[string]expectedTensor {
	t.Helper()
	content, err := os.ReadFile(path)
	require.NoError(t, err)
	content = pythonSpecials.ReplaceAll(content, []byte(`"$0"`))
	var expected map[string]expectedTensor
	require.NoError(t, json.Unmarshal(content, &expected))
	return expected
}

// expectedValue decodes one value of a fixture's JSON: a number, a boolean, or one of
// Python's special floats as quoted by readExpected.
func expectedValue(t *testing.T, raw json.RawMessage) float64 {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	switch v := v.(type) {
	case float64:
		return v
	case bool:
		return float64(boolByte(v))
	case string:
		switch v {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
	}
	t.Fatalf("unexpected value %s", raw)
	return 0
}

// TestFixtureValues checks every fixture *.safetensors that has a JSON description beside
// it: each tensor's dtype, shape and values, read every way the package offers.
func TestFixtureValues(t *testing.T) {
	dir := fixtures.Dir(t, "safetensors")
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	require.NoError(t, err)
	var checked int
	for _, path := range paths {
		jsonPath := strings.TrimSuffix(path, ".safetensors") + ".json"
		if _, err := os.Stat(jsonPath); err != nil {
			continue
		}
		checked++
		t.Run(filepath.Base(path), func(t *testing.T) {
			expected := readExpected(t, jsonPath)
			f, err := Open(path)
			require.NoError(t, err)
			defer func() { require.NoError(t, f.Close()) }()

			require.Len(t, f.Tensors(), len(expected))
			require.NotEmpty(t, f.Metadata(), "the fixture has metadata")
			for name, want := range expected {
				info, ok := f.Lookup(name)
				require.True(t, ok, name)
				wantDType, ok := torchDTypes[want.DType]
				require.True(t, ok, "unknown torch dtype %s", want.DType)
				require.Equal(t, wantDType, info.DType, name)
				require.Equal(t, want.Shape, info.Shape, name)
				require.Equal(t, f.Path(), info.Path)

				wantValues := make([]float64, len(want.Values))
				for i, raw := range want.Values {
					wantValues[i] = expectedValue(t, raw)
				}
				require.EqualValues(t, len(wantValues), info.NumElements(), name)

				// Float64 holds every value of every dtype exactly.
				exact, err := f.TensorAs(name, dtypes.Float64)
				require.NoError(t, err)
				require.Equal(t, info.Shape, exact.Shape().Dimensions)
				requireSameFloats(t, wantValues, flatFloat64s(t, exact), name)

				wantFloat32s := make([]float32, len(wantValues))
				for i, v := range wantValues {
					wantFloat32s[i] = float32(v) // exact for the fixture's values
				}
				got32, err := f.Float32s(name)
				require.NoError(t, err)
				requireSameFloats(t, wantFloat32s, got32, name)

				native, err := f.Tensor(name)
				require.NoError(t, err)
				require.Equal(t, info.DType.GoMLXDType(), native.DType(), name)
				require.Equal(t, info.Shape, native.Shape().Dimensions, name)
				raw, err := f.Bytes(name)
				require.NoError(t, err)
				if info.DType == F8E4M3 || info.DType == F8E5M2 {
					requireSameFloats(t, convertAll(raw, func(b byte) float64 { return float64(b) }), flatFloat64s(t, native), name)
				} else {
					requireSameFloats(t, wantValues, flatFloat64s(t, native), name)
				}
			}
		})
	}
	if checked == 0 {
		t.Fatalf("no *.safetensors with a matching .json in %s", dir)
	}
}

// TestFixtureShardedCheckpoints opens every fixture folder holding a sharded checkpoint
// through its index, and checks that each tensor is there and agrees with its shard.
func TestFixtureShardedCheckpoints(t *testing.T) {
	var checked int
	for _, dir := range fixtures.Subdirs(t, "safetensors") {
		indexPath := filepath.Join(dir, IndexFileName)
		if _, err := os.Stat(indexPath); err != nil {
			continue
		}
		checked++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var index struct {
				Metadata  map[string]any    `json:"metadata"`
				WeightMap map[string]string `json:"weight_map"`
			}
			content, err := os.ReadFile(indexPath)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(content, &index))

			ckpt, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer func() { require.NoError(t, ckpt.Close()) }()
			require.IsType(t, &Sharded{}, ckpt)
			require.Len(t, ckpt.Tensors(), len(index.WeightMap))
			if size, ok := index.Metadata["total_size"]; ok {
				require.Equal(t, strings.TrimSpace(string(mustJSON(t, size))), ckpt.Metadata()["total_size"])
			}

			for name, shardName := range index.WeightMap {
				info, ok := ckpt.Lookup(name)
				require.True(t, ok, name)
				require.Equal(t, filepath.Join(dir, shardName), info.Path)

				shard, err := Open(info.Path)
				require.NoError(t, err)
				shardInfo, ok := shard.Lookup(name)
				require.True(t, ok, name)
				require.Equal(t, shardInfo, info)
				shardBytes, err := shard.Bytes(name)
				require.NoError(t, err)
				ckptBytes, err := ckpt.Bytes(name)
				require.NoError(t, err)
				require.Equal(t, shardBytes, ckptBytes)
				require.NoError(t, shard.Close())

				values, err := ckpt.Float32s(name)
				require.NoError(t, err)
				require.EqualValues(t, info.NumElements(), len(values))
				tensor, err := ckpt.TensorAs(name, dtypes.Float32)
				require.NoError(t, err)
				require.Equal(t, info.Shape, tensor.Shape().Dimensions)
			}
		})
	}
	if checked == 0 {
		t.Fatal("no fixture folder holds a sharded checkpoint")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestFixturesRewriteByteForByte reads every safetensors file of the fixtures' safetensors
// folder, which the Python library wrote, and writes its tensors and metadata back with
// Writer: the library's output must come out byte for byte. (The model fixtures are left
// out: whatever wrote them put "__metadata__" last, which that library does not.)
func TestFixturesRewriteByteForByte(t *testing.T) {
	root := fixtures.Dir(t, "safetensors")
	var paths []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".safetensors") {
			paths = append(paths, path)
		}
		return err
	}))
	require.NotEmpty(t, paths)
	for _, path := range paths {
		rel, _ := filepath.Rel(root, path)
		t.Run(rel, func(t *testing.T) {
			original, err := os.ReadFile(path)
			require.NoError(t, err)
			f, err := Open(path)
			require.NoError(t, err)
			defer f.Close()

			var w Writer
			metadata := f.Metadata()
			// The Python library writes metadata in the arbitrary order of a Rust HashMap:
			// replay the file's order.
			for _, key := range metadataKeyOrder(t, original) {
				require.NoError(t, w.SetMetadata(key, metadata[key]))
			}
			for _, info := range f.Tensors() {
				data, err := f.Bytes(info.Name)
				require.NoError(t, err)
				require.NoError(t, w.Add(info.Name, info.DType, info.Shape, data))
			}
			var rewritten bytes.Buffer
			n, err := w.WriteTo(&rewritten)
			require.NoError(t, err)
			require.EqualValues(t, len(original), n)
			dataOffset := 8 + binary.LittleEndian.Uint64(original)
			require.Equal(t, string(original[:dataOffset]), string(rewritten.Bytes()[:dataOffset]), "length and header")
			require.True(t, bytes.Equal(original, rewritten.Bytes()), "data section differs")
		})
	}
}

// TestFixtureCheckpointFolders opens every fixture folder that holds a checkpoint, in
// either layout, and reads all of its tensors as float32.
func TestFixtureCheckpointFolders(t *testing.T) {
	root := fixtures.Dir(t)
	var checked int
	require.NoError(t, filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		_, errSingle := os.Stat(filepath.Join(dir, SingleFileName))
		_, errIndex := os.Stat(filepath.Join(dir, IndexFileName))
		if errSingle != nil && errIndex != nil {
			return nil
		}
		checked++
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			ckpt, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer func() { require.NoError(t, ckpt.Close()) }()
			require.NotEmpty(t, ckpt.Tensors())
			for _, info := range ckpt.Tensors() {
				values, err := ckpt.Float32s(info.Name)
				require.NoError(t, err)
				require.EqualValues(t, info.NumElements(), len(values), info.Name)
			}
		})
		return nil
	}))
	require.NotZero(t, checked, "no checkpoint folder among the fixtures")
}

// TestFloat8E4M3MatchesTorch compares the E4M3 decoder with torch's value for all 256
// bytes.
func TestFloat8E4M3MatchesTorch(t *testing.T) {
	path := fixtures.Dir(t, "fp8_e4m3fn.json")
	content, err := os.ReadFile(path)
	require.NoError(t, err)
	var reference struct {
		Decode []*float64 `json:"decode"` // null for NaN
	}
	require.NoError(t, json.Unmarshal(content, &reference))
	require.Len(t, reference.Decode, 256)
	for b, want := range reference.Decode {
		got := float8E4M3ToFloat32(uint8(b))
		if want == nil {
			require.Truef(t, math.IsNaN(float64(got)), "byte %#02x: want NaN, got %v", b, got)
			continue
		}
		require.Equalf(t, *want, float64(got), "byte %#02x", b)
		if *want == 0 { // the sign of zero matters too
			require.Equal(t, math.Signbit(*want), math.Signbit(float64(got)), "byte %#02x", b)
		}
	}
}
