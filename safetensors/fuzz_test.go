package safetensors

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadHeader feeds arbitrary content to ReadHeader, seeded from
// testdata/fuzz/FuzzReadHeader. It must never panic nor fail with anything but a
// *FormatError, and what it accepts must hold to the format's rules and come back the
// same through Writer.
func FuzzReadHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		h, err := ReadHeader(bytes.NewReader(content), int64(len(content)))
		if err != nil {
			var formatErr *FormatError
			require.True(t, errors.As(err, &formatErr), "want a *FormatError, got %T: %v", err, err)
			return
		}

		var covered int64
		for _, info := range h.Tensors {
			require.Equal(t, covered, info.Begin, "tensors tile the data section")
			size, err := byteSize(info.DType, info.Shape)
			require.NoError(t, err)
			require.Equal(t, size, info.ByteSize())
			covered = info.End
		}
		require.Equal(t, int64(len(content))-h.DataOffset, covered)

		var w Writer
		for key, value := range h.Metadata {
			require.NoError(t, w.SetMetadata(key, value))
		}
		for _, info := range h.Tensors {
			begin, end := info.FileOffsets()
			require.NoError(t, w.Add(info.Name, info.DType, info.Shape, content[begin:end]))
		}
		var rewritten bytes.Buffer
		_, err = w.WriteTo(&rewritten)
		require.NoError(t, err)
		h2, err := ReadHeader(bytes.NewReader(rewritten.Bytes()), int64(rewritten.Len()))
		require.NoError(t, err)
		require.Equal(t, len(h.Metadata), len(h2.Metadata)) // an empty "__metadata__" is not written
		for key, value := range h.Metadata {
			require.Equal(t, value, h2.Metadata[key])
		}
		require.Len(t, h2.Tensors, len(h.Tensors))
		original := make(map[string]TensorInfo)
		for _, info := range h.Tensors {
			original[info.Name] = info
		}
		for _, info := range h2.Tensors {
			want, ok := original[info.Name]
			require.True(t, ok, info.Name)
			require.Equal(t, want.DType, info.DType)
			require.Equal(t, want.Shape, info.Shape)
			wantBegin, wantEnd := want.FileOffsets()
			begin, end := info.FileOffsets()
			require.Equal(t, content[wantBegin:wantEnd], rewritten.Bytes()[begin:end])
		}
	})
}
