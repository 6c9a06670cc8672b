package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"
)

// synth builds safetensors content from a JSON header text and a data section.
func synth(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// readSynth parses synthetic content with ReadHeader.
func readSynth(header string, data []byte) (*Header, error) {
	content := synth(header, data)
	return ReadHeader(bytes.NewReader(content), int64(len(content)))
}

// writeTemp writes content to a file in a fresh temporary folder and returns its path.
func writeTemp(t *testing.T, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, content, 0o644))
	return path
}

// metadataKeyOrder returns the "__metadata__" keys of a safetensors file in the order its
// header lists them. The package exposes metadata as a map; the order only matters to
// reproduce a file byte for byte.
func metadataKeyOrder(t *testing.T, content []byte) []string {
	t.Helper()
	n := binary.LittleEndian.Uint64(content)
	var header struct {
		Metadata json.RawMessage `json:"__metadata__"`
	}
	require.NoError(t, json.Unmarshal(content[8:8+n], &header))
	if header.Metadata == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(header.Metadata))
	var keys []string
	_, err := dec.Token() // {
	require.NoError(t, err)
	for dec.More() {
		key, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, key.(string))
		_, err = dec.Token() // the value, a string
		require.NoError(t, err)
	}
	return keys
}

// flatFloat64s returns a GoMLX tensor's values as float64, whatever its dtype.
func flatFloat64s(t *testing.T, tensor *tensors.Tensor) []float64 {
	t.Helper()
	var values []float64
	require.NoError(t, tensor.ConstFlatData(func(flat any) {
		switch flat := flat.(type) {
		case []float64:
			values = flat
		case []float32:
			values = convertAll(flat, func(v float32) float64 { return float64(v) })
		case []float16.Float16:
			values = convertAll(flat, func(v float16.Float16) float64 { return v.Float64() })
		case []bfloat16.BFloat16:
			values = convertAll(flat, func(v bfloat16.BFloat16) float64 { return v.Float64() })
		case []int64:
			values = convertAll(flat, func(v int64) float64 { return float64(v) })
		case []int32:
			values = convertAll(flat, func(v int32) float64 { return float64(v) })
		case []int16:
			values = convertAll(flat, func(v int16) float64 { return float64(v) })
		case []int8:
			values = convertAll(flat, func(v int8) float64 { return float64(v) })
		case []uint8:
			values = convertAll(flat, func(v uint8) float64 { return float64(v) })
		case []bool:
			values = convertAll(flat, func(v bool) float64 { return float64(boolByte(v)) })
		case nil: // an empty tensor
			values = []float64{}
		default:
			panic(fmt.Sprintf("unexpected flat data %T", flat))
		}
	}))
	return append([]float64{}, values...) // copied: the tensor owns flat
}

func convertAll[T any](values []T, f func(T) float64) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		out[i] = f(v)
	}
	return out
}

// requireSameFloats checks that got equals want exactly, treating NaNs as equal.
func requireSameFloats[F float32 | float64](t *testing.T, want, got []F, msgAndArgs ...any) {
	t.Helper()
	require.Len(t, got, len(want), msgAndArgs...)
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsNaN(w) {
			require.Truef(t, math.IsNaN(g), "element %d: want NaN, got %v %v", i, g, fmt.Sprint(msgAndArgs...))
			continue
		}
		require.Equalf(t, math.Float64bits(w), math.Float64bits(g), "element %d: want %v, got %v %v", i, w, g, fmt.Sprint(msgAndArgs...))
	}
}
