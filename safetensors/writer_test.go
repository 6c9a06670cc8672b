package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestWriterRoundTrip writes tensors of every dtype, with scalars, empty tensors and
// awkward metadata, and reads them back bit for bit.
func TestWriterRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	randomBytes := func(dtype DType, n int) []byte {
		b := make([]byte, n*dtype.Size())
		for i := range b {
			b[i] = byte(rng.Uint32())
			if dtype == Bool {
				b[i] &= 1
			}
		}
		return b
	}
	type tensor struct {
		name  string
		dtype DType
		shape []int
		data  []byte
	}
	var want []tensor
	for d := Bool; d <= I64; d++ {
		for _, shape := range [][]int{{2, 3}, {}, {0, 4}, {3, 0, 2}, {5}} {
			want = append(want, tensor{name: d.String() + "/" + shapeName(shape), dtype: d, shape: shape})
		}
	}
	want = append(want, tensor{name: "unicode é \"quoted\" \\ \n <&>", dtype: F32, shape: []int{1}})
	metadata := map[string]string{
		"format":           "pt",
		"json":             `{"a": [1, 2]}`,
		"control\x01\t\n":  "tab\there\u2028",
		"":                 "empty key",
		"html <script>&'x": "é",
	}

	var w Writer
	for key, value := range metadata {
		require.NoError(t, w.SetMetadata(key, value))
	}
	for i := range want {
		want[i].data = randomBytes(want[i].dtype, int(product(want[i].shape)))
		require.NoError(t, w.Add(want[i].name, want[i].dtype, want[i].shape, want[i].data))
	}
	path := filepath.Join(t.TempDir(), "out.safetensors")
	require.NoError(t, w.WriteFile(path))

	content, err := os.ReadFile(path)
	require.NoError(t, err)
	headerLen := binary.LittleEndian.Uint64(content)
	require.Zero(t, headerLen%8, "the header is padded to a multiple of 8 bytes")
	require.True(t, json.Valid(content[8:8+headerLen]), "the header is valid JSON")
	require.True(t, bytes.HasPrefix(content[8:], []byte(`{"__metadata__":{`)), "metadata comes first")

	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, metadata, f.Metadata())
	require.Len(t, f.Tensors(), len(want))
	for _, wt := range want {
		info, ok := f.Lookup(wt.name)
		require.True(t, ok, wt.name)
		require.Equal(t, wt.dtype, info.DType, wt.name)
		require.Equal(t, wt.shape, info.Shape, wt.name)
		require.Zero(t, (info.DataOffset+info.Begin)%int64(wt.dtype.Size()), "%s is aligned to its element size", wt.name)
		data, err := f.Bytes(wt.name)
		require.NoError(t, err)
		require.Equal(t, wt.data, data, wt.name)
	}
}

func shapeName(shape []int) string {
	b, _ := json.Marshal(shape)
	return string(b)
}

func product(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

func TestWriterWithoutMetadataOrTensors(t *testing.T) {
	var w Writer
	var out bytes.Buffer
	n, err := w.WriteTo(&out)
	require.NoError(t, err)
	require.EqualValues(t, 16, n)
	require.Equal(t, "\x08\x00\x00\x00\x00\x00\x00\x00{}      ", out.String(), "the reference implementation's empty file")

	require.NoError(t, w.SetMetadata("format", "pt"))
	require.NoError(t, w.SetMetadata("format", "np"))
	out.Reset()
	_, err = w.WriteTo(&out)
	require.NoError(t, err)
	require.Equal(t, `{"__metadata__":{"format":"np"}}`, string(bytes.TrimRight(out.Bytes()[8:], " ")))
}

func TestWriterAddFloat32s(t *testing.T) {
	values := []float32{0, -1.5, 3.140625, 65504, 1e-8, float32(math.Inf(-1))}
	var w Writer
	for _, d := range []DType{F32, F64, F16, BF16} {
		require.NoError(t, w.AddFloat32s(d.String(), d, []int{2, 3}, values))
	}
	require.ErrorContains(t, w.AddFloat32s("i", I32, []int{6}, values), "cannot encode float32 values as I32")
	require.ErrorContains(t, w.AddFloat32s("short", F32, []int{7}, values), "24 bytes of data, but shape [7] of F32 needs 28")
	path := filepath.Join(t.TempDir(), "floats.safetensors")
	require.NoError(t, w.WriteFile(path))

	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	for _, d := range []DType{F32, F64, F16, BF16} {
		got, err := f.Float32s(d.String())
		require.NoError(t, err)
		want := make([]float32, len(values))
		for i, v := range values {
			switch d {
			case F16:
				want[i] = float16ToFloat32(float32ToFloat16(v))
			case BF16:
				want[i] = bfloat16ToFloat32(float32ToBFloat16(v))
			default:
				want[i] = v
			}
		}
		requireSameFloats(t, want, got, d)
	}
}

// TestWriterAddTensor writes GoMLX tensors of every dtype that has a safetensors
// equivalent and reads them back as equal tensors.
func TestWriterAddTensor(t *testing.T) {
	inputs := map[string]*tensors.Tensor{
		"f64":    tensors.FromValue([][]float64{{1.5, -2}, {3, math.Inf(1)}}),
		"f32":    tensors.FromValue([]float32{1, 2, 3}),
		"f16":    tensors.FromValue([]float16.Float16{float16.FromFloat32(0.5), float16.FromFloat32(-2)}),
		"bf16":   tensors.FromValue([]bfloat16.BFloat16{bfloat16.FromFloat32(1.25)}),
		"i64":    tensors.FromValue([]int64{-1 << 62, 7}),
		"i32":    tensors.FromValue([]int32{-5, 1 << 30}),
		"i16":    tensors.FromValue([]int16{-300, 300}),
		"i8":     tensors.FromValue([]int8{-128, 127}),
		"u8":     tensors.FromValue([]uint8{0, 255}),
		"bool":   tensors.FromValue([]bool{true, false, true}),
		"scalar": tensors.FromScalar(float32(2.5)),
		"empty":  tensors.FromFlatDataAndDimensions([]float32{}, 0, 3),
	}
	var w Writer
	for name, tensor := range inputs {
		require.NoError(t, w.AddTensor(name, tensor), name)
	}
	require.ErrorContains(t, w.AddTensor("u32", tensors.FromValue([]uint32{1})), "GoMLX dtype Uint32 has no safetensors equivalent")

	path := filepath.Join(t.TempDir(), "tensors.safetensors")
	require.NoError(t, w.WriteFile(path))
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	for name, want := range inputs {
		got, err := f.Tensor(name)
		require.NoError(t, err, name)
		require.True(t, want.Shape().Equal(got.Shape()), "%s: %s vs %s", name, want.Shape(), got.Shape())
		require.Equal(t, flatFloat64s(t, want), flatFloat64s(t, got), name)
	}
}

func TestWriterAddErrors(t *testing.T) {
	var w Writer
	require.NoError(t, w.Add("w", U8, []int{2}, []byte{1, 2}))
	require.ErrorContains(t, w.Add("w", U8, []int{2}, []byte{1, 2}), `tensor "w": added twice`)
	require.ErrorContains(t, w.Add("__metadata__", U8, []int{1}, []byte{1}), "reserved")
	require.ErrorContains(t, w.Add("bad\xff", U8, []int{1}, []byte{1}), "not valid UTF-8")
	require.ErrorContains(t, w.Add("x", DType(0), []int{1}, []byte{1}), "invalid dtype")
	require.ErrorContains(t, w.Add("x", F32, []int{2}, []byte{1}), "1 bytes of data, but shape [2] of F32 needs 8")
	require.ErrorContains(t, w.Add("x", F32, []int{-2}, nil), "dimension -2 is negative")
	require.ErrorContains(t, w.Add("x", U8, []int{1 << 62, 1 << 62}, nil), "element count overflows")
	require.ErrorContains(t, w.SetMetadata("k", "\xff"), "not valid UTF-8")
}

// TestWriteFileLeavesNoPartialFile checks that a failed write leaves neither a file at the
// destination nor a temporary file beside it.
func TestWriteFileLeavesNoPartialFile(t *testing.T) {
	dir := t.TempDir()
	var w Writer
	require.NoError(t, w.AddFloat32s("w", F32, []int{4}, []float32{1, 2, 3, 4}))

	// The destination is a non-empty folder: everything succeeds but the final rename.
	dest := filepath.Join(dir, "model.safetensors")
	require.NoError(t, os.MkdirAll(filepath.Join(dest, "inside"), 0o755))
	require.Error(t, w.WriteFile(dest))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the folder that was there")

	// A folder that does not exist.
	require.Error(t, w.WriteFile(filepath.Join(dir, "missing", "x.safetensors")))

	// Success replaces an existing file whole.
	existing := filepath.Join(dir, "existing.safetensors")
	require.NoError(t, os.WriteFile(existing, []byte("old content"), 0o644))
	require.NoError(t, w.WriteFile(existing))
	f, err := Open(existing)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2)
}

func TestDTypeFromGoMLX(t *testing.T) {
	for d := Bool; d <= I64; d++ {
		back, err := DTypeFromGoMLX(d.GoMLXDType())
		require.NoError(t, err)
		if d == F8E4M3 || d == F8E5M2 {
			require.Equal(t, U8, back, "float8 is held as bytes")
		} else {
			require.Equal(t, d, back)
		}
		parsed, err := ParseDType(d.String())
		require.NoError(t, err)
		require.Equal(t, d, parsed)
	}
	_, err := DTypeFromGoMLX(dtypes.InvalidDType)
	require.Error(t, err)
	require.Equal(t, "DType(0)", DType(0).String())
	require.Zero(t, DType(99).Size())
}
