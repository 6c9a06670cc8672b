package safetensors

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes. It is the reference
// implementation's limit, and keeps a corrupt length from causing a huge allocation.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key holding the free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int // row-major dimensions; empty for a scalar

	// Begin and End are the header's data_offsets: the tensor's bytes are [Begin, End)
	// of the data section.
	Begin, End int64

	// DataOffset is where the data section starts in the file (8 + the header length), so
	// the tensor's bytes are [DataOffset+Begin, DataOffset+End) of the file.
	DataOffset int64

	// Path is the file holding the tensor; empty for a header read with ReadHeader.
	Path string
}

// NumElements returns the number of elements: the product of the shape, 1 for a scalar.
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d) // cannot overflow: the header was validated
	}
	return n
}

// ByteSize returns the size of the tensor's data in bytes.
func (t TensorInfo) ByteSize() int64 { return t.End - t.Begin }

// FileOffsets returns the tensor's byte range in the file, [begin, end).
func (t TensorInfo) FileOffsets() (begin, end int64) {
	return t.DataOffset + t.Begin, t.DataOffset + t.End
}

// Header is the parsed and validated header of a safetensors file.
type Header struct {
	// Metadata holds the "__metadata__" strings; nil when the header has none.
	Metadata map[string]string

	// Tensors lists the tensors in the order of their data.
	Tensors []TensorInfo

	// DataOffset is where the data section starts: 8 + the header length.
	DataOffset int64
}

// ReadHeader reads the header of safetensors content that is size bytes long from r, and
// validates it: the header length must fit in the content and not exceed [MaxHeaderSize],
// the header must be a JSON object without repeated keys whose entries describe tensors of
// known dtypes, and the tensors' byte ranges must match their shapes and tile the data
// section exactly, without gaps or overlaps. Malformed content yields a *FormatError.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	return readHeader(r, size, "")
}

// readHeader implements ReadHeader, naming path in errors.
func readHeader(r io.ReaderAt, size int64, path string) (*Header, error) {
	if size < 8 {
		return nil, formatErrorf(path, "", "%d bytes is too short to hold the 8-byte header length", size)
	}
	var prefix [8]byte
	if err := readAt(r, prefix[:], 0); err != nil {
		return nil, pathError(path, err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, formatErrorf(path, "", "header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, formatErrorf(path, "", "header length %d runs past the end of the %d-byte file", n, size)
	}
	headerJSON := make([]byte, n)
	if err := readAt(r, headerJSON, 8); err != nil {
		return nil, pathError(path, err)
	}
	dataOffset := 8 + int64(n)
	h, err := parseHeader(headerJSON, size-dataOffset, path)
	if err != nil {
		return nil, err
	}
	h.DataOffset = dataOffset
	for i := range h.Tensors {
		h.Tensors[i].DataOffset = dataOffset
		h.Tensors[i].Path = path
	}
	return h, nil
}

// readAt fills buf from r at off.
func readAt(r io.ReaderAt, buf []byte, off int64) error {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return nil // ReadAt may report io.EOF along with a read that ends at the end
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading header: %w", err)
}

// parseHeader parses and validates the JSON header of a file whose data section is
// dataSize bytes long.
func parseHeader(headerJSON []byte, dataSize int64, path string) (*Header, error) {
	if !utf8.Valid(headerJSON) {
		return nil, formatErrorf(path, "", "header is not valid UTF-8")
	}
	if len(headerJSON) == 0 || headerJSON[0] != '{' {
		return nil, formatErrorf(path, "", "header does not start with '{'")
	}
	p := newJSONParser(headerJSON, path)
	h := &Header{}
	_, err := p.object("", "header", func(key string) error {
		if key == metadataKey {
			var err error
			h.Metadata, err = parseMetadata(p)
			return err
		}
		info, err := parseTensorEntry(p, key, dataSize)
		h.Tensors = append(h.Tensors, info)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := p.end(); err != nil {
		return nil, err
	}
	if err := checkTiling(h.Tensors, dataSize, path); err != nil {
		return nil, err
	}
	return h, nil
}

// parseMetadata reads the "__metadata__" object: strings only, or null.
func parseMetadata(p *jsonParser) (map[string]string, error) {
	metadata := make(map[string]string)
	present, err := p.object("", metadataKey, func(key string) error {
		value, err := p.string("", fmt.Sprintf("%s value %q", metadataKey, key))
		metadata[key] = value
		return err
	})
	if !present {
		return nil, err
	}
	return metadata, err
}

// parseTensorEntry reads the header entry of tensor name and checks it on its own; how
// it fits with the other tensors is checkTiling's job.
func parseTensorEntry(p *jsonParser, name string, dataSize int64) (TensorInfo, error) {
	var (
		dtypeName      string
		hasDType       bool
		shape, offsets []int64 // nil when absent
	)
	present, err := p.object(name, "entry", func(key string) error {
		var err error
		switch key {
		case "dtype":
			dtypeName, err = p.string(name, "dtype")
			hasDType = true
		case "shape":
			shape, err = p.naturals(name, "shape")
		case "data_offsets":
			offsets, err = p.naturals(name, "data_offsets")
		default:
			_, err = p.raw(name) // other keys are ignored, as the reference implementation does
		}
		return err
	})
	switch {
	case err != nil:
		return TensorInfo{}, err
	case !present:
		return TensorInfo{}, formatErrorf(p.path, name, "entry is a JSON null, not an object")
	case !hasDType:
		return TensorInfo{}, formatErrorf(p.path, name, `entry has no "dtype"`)
	case shape == nil:
		return TensorInfo{}, formatErrorf(p.path, name, `entry has no "shape"`)
	case offsets == nil:
		return TensorInfo{}, formatErrorf(p.path, name, `entry has no "data_offsets"`)
	case len(offsets) != 2:
		return TensorInfo{}, formatErrorf(p.path, name, "data_offsets holds %d numbers, not 2", len(offsets))
	}

	info := TensorInfo{Name: name, Begin: offsets[0], End: offsets[1]}
	if info.DType, err = ParseDType(dtypeName); err != nil {
		return TensorInfo{}, &FormatError{Path: p.path, Tensor: name, Msg: err.Error()}
	}
	size, err := byteSize(info.DType, shape)
	if err != nil {
		return TensorInfo{}, &FormatError{Path: p.path, Tensor: name, Msg: err.Error()}
	}
	info.Shape = make([]int, len(shape))
	for i, d := range shape {
		if int64(int(d)) != d {
			return TensorInfo{}, formatErrorf(p.path, name, "shape %v: dimension %d does not fit in an int", shape, d)
		}
		info.Shape[i] = int(d)
	}
	switch {
	case info.Begin > info.End:
		return TensorInfo{}, formatErrorf(p.path, name, "data_offsets [%d, %d]: begin is after end", info.Begin, info.End)
	case info.End > dataSize:
		return TensorInfo{}, formatErrorf(p.path, name, "data_offsets [%d, %d] run past the end of the %d-byte data section",
			info.Begin, info.End, dataSize)
	case info.End-info.Begin != size:
		return TensorInfo{}, formatErrorf(p.path, name, "data_offsets [%d, %d] span %d bytes, but shape %v of %s needs %d",
			info.Begin, info.End, info.End-info.Begin, info.Shape, info.DType, size)
	}
	return info, nil
}

// byteSize returns the number of bytes of a tensor of the given dtype and shape, failing on
// negative dimensions and on sizes that overflow an int64.
func byteSize[Dim int | int64](dtype DType, shape []Dim) (int64, error) {
	count := int64(1)
	for _, d := range shape {
		switch {
		case d < 0:
			return 0, fmt.Errorf("shape %v: dimension %d is negative", shape, d)
		case d != 0 && count > math.MaxInt64/int64(d):
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		count *= int64(d)
	}
	if count > math.MaxInt64/int64(dtype.Size()) {
		return 0, fmt.Errorf("shape %v: size in bytes of %s overflows int64", shape, dtype)
	}
	return count * int64(dtype.Size()), nil
}

// checkTiling sorts tensors by their data and checks that they cover the data section
// exactly: every byte belongs to exactly one tensor, as the reference implementation
// requires.
func checkTiling(tensors []TensorInfo, dataSize int64, path string) error {
	slices.SortFunc(tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	var covered int64 // the data section's bytes [0, covered) belong to tensors seen so far
	for i, t := range tensors {
		switch {
		case t.Begin < covered:
			prev := tensors[i-1]
			return formatErrorf(path, t.Name, "data_offsets [%d, %d] overlap those of tensor %q, [%d, %d]",
				t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		case t.Begin > covered:
			return formatErrorf(path, t.Name, "data_offsets [%d, %d] leave a gap: bytes [%d, %d) of the data section belong to no tensor",
				t.Begin, t.End, covered, t.Begin)
		}
		covered = t.End
	}
	if covered != dataSize {
		return formatErrorf(path, "", "the last %d bytes of the %d-byte data section belong to no tensor",
			dataSize-covered, dataSize)
	}
	return nil
}
