package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// entry returns the header entry of one tensor.
func entry(name, dtype, shape string, begin, end int) string {
	return fmt.Sprintf(`%q:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, dtype, shape, begin, end)
}

func TestReadHeaderValid(t *testing.T) {
	header := `{"__metadata__":{"format":"pt","note":"a \"quoted\" \u00e9"},` +
		entry("b", "F32", "[2]", 0, 8) + "," +
		entry("a", "I8", "[0,3]", 8, 8) + "," +
		entry("s", "F64", "[]", 8, 16) + "}   "
	h, err := readSynth(header, make([]byte, 16))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"format": "pt", "note": `a "quoted" é`}, h.Metadata)
	require.EqualValues(t, 8+len(header), h.DataOffset)
	require.Equal(t, []TensorInfo{
		{Name: "b", DType: F32, Shape: []int{2}, Begin: 0, End: 8, DataOffset: h.DataOffset},
		{Name: "a", DType: I8, Shape: []int{0, 3}, Begin: 8, End: 8, DataOffset: h.DataOffset},
		{Name: "s", DType: F64, Shape: []int{}, Begin: 8, End: 16, DataOffset: h.DataOffset},
	}, h.Tensors)
	begin, end := h.Tensors[2].FileOffsets()
	require.Equal(t, h.DataOffset+8, begin)
	require.Equal(t, h.DataOffset+16, end)
	require.EqualValues(t, 1, h.Tensors[2].NumElements())
	require.EqualValues(t, 0, h.Tensors[1].NumElements())
}

func TestReadHeaderEmptyAndUnknownKeys(t *testing.T) {
	h, err := readSynth(`{}`, nil)
	require.NoError(t, err)
	require.Empty(t, h.Tensors)
	require.Nil(t, h.Metadata)

	h, err = readSynth(`{"__metadata__":null,"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":[{"x":1}]}}`, []byte{7})
	require.NoError(t, err, "unknown keys in an entry are ignored, as the reference implementation does")
	require.Nil(t, h.Metadata)
	require.Len(t, h.Tensors, 1)
}

// TestReadHeaderErrors checks one malformed input per rule, and that the error says what
// is wrong and names the tensor concerned.
func TestReadHeaderErrors(t *testing.T) {
	lengthOnly := func(n uint64, rest string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
	}
	f32x2 := func(name string, begin, end int) string { return entry(name, "F32", "[2]", begin, end) }
	tests := []struct {
		name    string
		content []byte
		want    []string // substrings of the error message
	}{
		{"shorter than the length", []byte{1, 2, 3}, []string{"3 bytes is too short"}},
		{"header over 100 MB", lengthOnly(100_000_001, "{}"), []string{"header length 100000001 exceeds the limit of 100000000 bytes"}},
		{"header length past the end", lengthOnly(64, "{}"), []string{"header length 64 runs past the end of the 10-byte file"}},
		{"header length overflowing", lengthOnly(1<<63, "{}"), []string{"exceeds the limit"}},
		{"invalid JSON", synth(`{"w":`, nil), []string{"invalid JSON"}},
		{"invalid UTF-8", synth("{\"\xff\":1}", nil), []string{"not valid UTF-8"}},
		{"not an object", synth(`[1,2]`, nil), []string{"does not start with '{'"}},
		{"empty header", synth(``, nil), []string{"does not start with '{'"}},
		{"trailing data after the JSON", synth(`{} {}`, nil), []string{"unexpected data after the JSON object"}},
		{"array entry", synth(`{"w":[1,2]}`, nil), []string{`tensor "w"`, "entry is a JSON array, not an object"}},
		{"null entry", synth(`{"w":null}`, nil), []string{`tensor "w"`, "entry is a JSON null, not an object"}},
		{"string entry", synth(`{"w":"F32"}`, nil), []string{`tensor "w"`, "entry is a JSON string, not an object"}},
		{"missing dtype", synth(`{"w":{"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, `no "dtype"`}},
		{"missing shape", synth(`{"w":{"dtype":"F32","data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, `no "shape"`}},
		{"missing data_offsets", synth(`{"w":{"dtype":"F32","shape":[1]}}`, nil), []string{`tensor "w"`, `no "data_offsets"`}},
		{"dtype not a string", synth(`{"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, "dtype is a JSON number, not a string"}},
		{"unknown dtype", synth(`{`+entry("w", "U16", "[2]", 0, 4)+`}`, make([]byte, 4)), []string{`tensor "w"`, `unsupported dtype "U16"`}},
		{"lower-case dtype", synth(`{`+entry("w", "f32", "[1]", 0, 4)+`}`, make([]byte, 4)), []string{`tensor "w"`, `unsupported dtype "f32"`}},
		{"three offsets", synth(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, make([]byte, 4)), []string{`tensor "w"`, "data_offsets holds 3 numbers, not 2"}},
		{"offsets past the data", synth(`{`+f32x2("w", 0, 8)+`}`, make([]byte, 4)), []string{`tensor "w"`, "data_offsets [0, 8] run past the end of the 4-byte data section"}},
		{"begin after end", synth(`{`+entry("w", "F32", "[0]", 4, 0)+`}`, make([]byte, 4)), []string{`tensor "w"`, "data_offsets [4, 0]: begin is after end"}},
		{"negative offset", synth(`{`+entry("w", "F32", "[1]", -4, 0)+`}`, nil), []string{`tensor "w"`, "data_offsets: -4 is negative"}},
		{"overlapping ranges", synth(`{`+f32x2("a", 0, 8)+`,`+f32x2("b", 4, 12)+`}`, make([]byte, 12)),
			[]string{`tensor "b"`, `data_offsets [4, 12] overlap those of tensor "a", [0, 8]`}},
		{"the same range twice", synth(`{`+f32x2("a", 0, 8)+`,`+f32x2("b", 0, 8)+`}`, make([]byte, 16)), []string{`tensor "b"`, `overlap those of tensor "a"`}},
		{"a gap between tensors", synth(`{`+f32x2("a", 0, 8)+`,`+f32x2("b", 12, 20)+`}`, make([]byte, 20)),
			[]string{`tensor "b"`, "leave a gap: bytes [8, 12) of the data section belong to no tensor"}},
		{"a gap at the start", synth(`{`+f32x2("a", 4, 12)+`}`, make([]byte, 12)), []string{`tensor "a"`, "bytes [0, 4) of the data section belong to no tensor"}},
		{"bytes after the last tensor", synth(`{`+f32x2("a", 0, 8)+`}`, make([]byte, 12)), []string{"the last 4 bytes of the 12-byte data section belong to no tensor"}},
		{"data without tensors", synth(`{}`, make([]byte, 3)), []string{"the last 3 bytes of the 3-byte data section"}},
		{"size not matching the shape", synth(`{`+entry("w", "F32", "[3]", 0, 8)+`}`, make([]byte, 8)),
			[]string{`tensor "w"`, "data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12"}},
		{"negative dimension", synth(`{`+entry("w", "F32", "[-1,2]", 0, 0)+`}`, nil), []string{`tensor "w"`, "shape: -1 is negative"}},
		{"fractional dimension", synth(`{`+entry("w", "F32", "[2.5]", 0, 10)+`}`, make([]byte, 10)), []string{`tensor "w"`, "shape: 2.5 is not an integer"}},
		{"exponent dimension", synth(`{`+entry("w", "U8", "[1e2]", 0, 100)+`}`, make([]byte, 100)), []string{`tensor "w"`, "shape: 1e2 is not an integer"}},
		{"dimension beyond int64", synth(`{`+entry("w", "U8", "[99999999999999999999]", 0, 0)+`}`, nil), []string{`tensor "w"`, "shape: 99999999999999999999 does not fit in 64 bits"}},
		{"element count overflowing", synth(`{`+entry("w", "U8", "[4294967296,4294967296,0]", 0, 0)+`}`, nil),
			[]string{`tensor "w"`, "element count overflows int64"}},
		{"byte size overflowing", synth(`{`+entry("w", "F64", "[2305843009213693952]", 0, 0)+`}`, nil),
			[]string{`tensor "w"`, "size in bytes of F64 overflows int64"}},
		{"shape not an array", synth(`{`+entry("w", "F32", `"2"`, 0, 8)+`}`, make([]byte, 8)), []string{`tensor "w"`, "shape is a JSON string, not an array"}},
		{"shape holding a string", synth(`{`+entry("w", "F32", `["2"]`, 0, 8)+`}`, make([]byte, 8)), []string{`tensor "w"`, "shape holds a JSON string, not a number"}},
		{"duplicate tensor name", synth(`{`+f32x2("w", 0, 8)+`,`+f32x2("w", 8, 16)+`}`, make([]byte, 16)), []string{`header: key "w" appears twice`}},
		{"duplicate key in an entry", synth(`{"w":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)),
			[]string{`tensor "w"`, `entry: key "dtype" appears twice`}},
		{"duplicate metadata", synth(`{"__metadata__":{"a":"1"},"__metadata__":{"a":"1"}}`, nil), []string{`key "__metadata__" appears twice`}},
		{"duplicate metadata key", synth(`{"__metadata__":{"a":"1","a":"2"}}`, nil), []string{`__metadata__: key "a" appears twice`}},
		{"metadata not an object", synth(`{"__metadata__":["pt"]}`, nil), []string{"__metadata__ is a JSON array, not an object"}},
		{"metadata value not a string", synth(`{"__metadata__":{"total":3}}`, nil), []string{`__metadata__ value "total" is a JSON number, not a string`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tt.content), int64(len(tt.content)))
			require.Error(t, err)
			var formatErr *FormatError
			require.True(t, errors.As(err, &formatErr), "want a *FormatError, got %T: %v", err, err)
			for _, want := range tt.want {
				require.Contains(t, err.Error(), want)
			}
		})
	}
}

// TestOpenErrorsNameTheFile checks that Open's errors name the file.
func TestOpenErrorsNameTheFile(t *testing.T) {
	path := writeTemp(t, "bad.safetensors", synth(`{`+entry("w", "U16", "[1]", 0, 2)+`}`, make([]byte, 2)))
	_, err := Open(path)
	require.ErrorContains(t, err, "safetensors: "+path+`: tensor "w": unsupported dtype "U16"`)

	empty := writeTemp(t, "empty.safetensors", nil)
	_, err = Open(empty)
	require.ErrorContains(t, err, empty+": 0 bytes is too short")

	_, err = Open(t.TempDir())
	require.ErrorContains(t, err, "not a regular file")

	_, err = Open(path + ".missing")
	require.ErrorIs(t, err, os.ErrNotExist)
}
