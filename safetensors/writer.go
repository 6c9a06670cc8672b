package safetensors

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gomlx/gomlx/core/tensors"
)

// Writer collects tensors and metadata, then writes them as a safetensors file. The zero
// Writer is ready to use.
//
// The layout is the reference implementation's, which the Python library uses: the header
// is compact JSON with "__metadata__" first, the tensors are laid out by descending dtype
// rank (roughly, wider elements first, which keeps every tensor aligned to its element
// size) and then by name, and the header is padded with spaces to a multiple of 8 bytes.
// So a file that library wrote comes out byte for byte the same when its tensors and
// metadata, in the file's order, are written back.
type Writer struct {
	metadata []metadataEntry // in the order first set
	tensors  []pendingTensor
	names    map[string]bool
}

type metadataEntry struct{ key, value string }

type pendingTensor struct {
	name  string
	dtype DType
	shape []int
	data  []byte
}

// SetMetadata sets a "__metadata__" string. Keys are written in the order they were first
// set (the Python library's order is its Rust HashMap's, which is arbitrary); setting a
// key again replaces its value in place. Keys and values must be valid UTF-8.
func (w *Writer) SetMetadata(key, value string) error {
	if !utf8.ValidString(key) || !utf8.ValidString(value) {
		return fmt.Errorf("safetensors: metadata %q: key or value is not valid UTF-8", key)
	}
	for i := range w.metadata {
		if w.metadata[i].key == key {
			w.metadata[i].value = value
			return nil
		}
	}
	w.metadata = append(w.metadata, metadataEntry{key, value})
	return nil
}

// Add adds a tensor given as raw little-endian bytes, which must hold exactly the
// elements of shape. The data is not copied: it must not change until the file is
// written. Names must be valid UTF-8, unique, and other than "__metadata__".
func (w *Writer) Add(name string, dtype DType, shape []int, data []byte) error {
	if err := w.checkName(name); err != nil {
		return err
	}
	if !dtype.valid() {
		return fmt.Errorf("safetensors: tensor %q: invalid dtype %s", name, dtype)
	}
	size, err := byteSize(dtype, shape)
	if err == nil && int64(len(data)) != size {
		err = fmt.Errorf("%d bytes of data, but shape %v of %s needs %d", len(data), shape, dtype, size)
	}
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	if w.names == nil {
		w.names = make(map[string]bool)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, pendingTensor{name, dtype, slices.Clone(shape), data})
	return nil
}

// AddFloat32s adds a tensor of dtype F32, F64, F16 or BF16 from float32 values, which
// are rounded to nearest even for the half-precision dtypes.
func (w *Writer) AddFloat32s(name string, dtype DType, shape []int, values []float32) error {
	data := make([]byte, len(values)*dtype.Size())
	le := binary.LittleEndian
	switch dtype {
	case F32:
		for i, v := range values {
			le.PutUint32(data[4*i:], math.Float32bits(v))
		}
	case F64:
		for i, v := range values {
			le.PutUint64(data[8*i:], math.Float64bits(float64(v)))
		}
	case F16:
		for i, v := range values {
			le.PutUint16(data[2*i:], float32ToFloat16(v))
		}
	case BF16:
		for i, v := range values {
			le.PutUint16(data[2*i:], float32ToBFloat16(v))
		}
	default:
		return fmt.Errorf("safetensors: tensor %q: cannot encode float32 values as %s", name, dtype)
	}
	return w.Add(name, dtype, shape, data)
}

// AddTensor adds a copy of a GoMLX tensor, stored in the dtype [DTypeFromGoMLX] gives.
func (w *Writer) AddTensor(name string, t *tensors.Tensor) error {
	dtype, err := DTypeFromGoMLX(t.DType())
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	data := make([]byte, t.Shape().ByteSize())
	if len(data) > 0 { // empty tensors have no storage to read
		err = t.ConstBytes(func(src []byte) { copyLittleEndian(data, src, dtype.Size()) })
		if err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
	}
	return w.Add(name, dtype, t.Shape().Dimensions, data)
}

// WriteTo writes the file to dst and returns the number of bytes written.
func (w *Writer) WriteTo(dst io.Writer) (int64, error) {
	order := slices.Clone(w.tensors)
	slices.SortFunc(order, func(a, b pendingTensor) int {
		return cmp.Or(cmp.Compare(b.dtype, a.dtype), cmp.Compare(a.name, b.name))
	})
	header := w.header(order)
	if len(header)-8 > MaxHeaderSize {
		return 0, fmt.Errorf("safetensors: header of %d bytes exceeds the limit of %d", len(header)-8, MaxHeaderSize)
	}
	n, err := dst.Write(header)
	written := int64(n)
	for _, t := range order {
		if err != nil {
			break
		}
		n, err = dst.Write(t.data)
		written += int64(n)
	}
	if err != nil {
		return written, pathError("", err)
	}
	return written, nil
}

// WriteFile writes the file to path. It writes to a temporary file in the same folder and
// renames it into place, so that path never holds a partly written file. The file gets
// permissions 0644.
func (w *Writer) WriteFile(path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return pathError("", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	if _, err := w.WriteTo(buf); err != nil {
		return err
	}
	if err := buf.Flush(); err != nil {
		return pathError("", err)
	}
	for _, step := range []func() error{
		func() error { return tmp.Chmod(0o644) },
		tmp.Sync, // the data must be on disk before the rename makes it visible
		tmp.Close,
		func() error { return os.Rename(tmp.Name(), path) },
	} {
		if err := step(); err != nil {
			return pathError("", err)
		}
	}
	return nil
}

// checkName checks that name can be added.
func (w *Writer) checkName(name string) error {
	switch {
	case !utf8.ValidString(name):
		return fmt.Errorf("safetensors: tensor %q: name is not valid UTF-8", name)
	case name == metadataKey:
		return fmt.Errorf("safetensors: tensor %q: name is reserved for the metadata", name)
	case w.names[name]:
		return fmt.Errorf("safetensors: tensor %q: added twice", name)
	}
	return nil
}

// header returns the 8-byte length followed by the JSON header, padded with spaces to a
// multiple of 8 bytes, for the tensors in the given order.
func (w *Writer) header(order []pendingTensor) []byte {
	b := make([]byte, 8, 256)
	b = append(b, '{')
	if len(w.metadata) > 0 {
		b = appendJSONString(b, metadataKey)
		b = append(b, ":{"...)
		for i, m := range w.metadata {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = appendJSONString(b, m.value)
		}
		b = append(b, '}')
	}
	var offset int64
	for i, t := range order {
		if i > 0 || len(w.metadata) > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, t.dtype.String())
		b = append(b, `,"shape":[`...)
		for j, d := range t.shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, offset, 10)
		offset += int64(len(t.data))
		b = append(b, ',')
		b = strconv.AppendInt(b, offset, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
	return b
}

// appendJSONString appends s as a JSON string escaped the way serde_json, which the
// reference implementation uses, escapes it: quotes, backslashes and control characters
// only, with the short forms where JSON has them. (encoding/json also escapes <, >, &,
// U+2028 and U+2029, which would change the bytes.)
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}
