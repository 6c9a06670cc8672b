package safetensors

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"
)

// tensorSet holds what File and Sharded share: the tensors' descriptions, views of their
// bytes, and the lookups and conversions built on them.
type tensorSet struct {
	source   string // the file or index the set was read from, for error messages
	metadata map[string]string
	infos    []TensorInfo
	views    [][]byte // views[i] holds the bytes of infos[i]
	byName   map[string]int
	closed   bool
}

func newTensorSet(source string, metadata map[string]string, infos []TensorInfo, views [][]byte) tensorSet {
	byName := make(map[string]int, len(infos))
	for i, info := range infos {
		byName[info.Name] = i
	}
	return tensorSet{source: source, metadata: metadata, infos: infos, views: views, byName: byName}
}

// Metadata returns a copy of the metadata strings; nil when there are none.
func (s *tensorSet) Metadata() map[string]string { return maps.Clone(s.metadata) }

// Tensors returns the descriptions of all tensors, in the order of their data.
func (s *tensorSet) Tensors() []TensorInfo { return slices.Clone(s.infos) }

// Lookup returns the description of the tensor named name, and whether there is one.
func (s *tensorSet) Lookup(name string) (TensorInfo, bool) {
	i, ok := s.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.infos[i], true
}

// Bytes returns the raw little-endian bytes of the tensor named name without copying them.
// The slice views read-only memory that stays valid until Close: writing to it crashes
// the program.
func (s *tensorSet) Bytes(name string) ([]byte, error) {
	_, data, err := s.view(name)
	return data, err
}

// Float32s returns the values of the tensor named name converted to float32; see
// [DecodeFloat32s].
func (s *tensorSet) Float32s(name string) ([]float32, error) {
	info, data, err := s.view(name)
	if err != nil {
		return nil, err
	}
	values, err := DecodeFloat32s(info.DType, data)
	if err != nil {
		return nil, tensorError(info, err)
	}
	return values, nil
}

// Tensor returns a copy of the tensor named name as a GoMLX tensor of its own dtype; see
// [DecodeTensor].
func (s *tensorSet) Tensor(name string) (*tensors.Tensor, error) {
	info, data, err := s.view(name)
	if err != nil {
		return nil, err
	}
	return DecodeTensor(info, data)
}

// TensorAs returns the tensor named name as a GoMLX tensor of the given dtype; see
// [DecodeTensorAs].
func (s *tensorSet) TensorAs(name string, dtype dtypes.DType) (*tensors.Tensor, error) {
	info, data, err := s.view(name)
	if err != nil {
		return nil, err
	}
	return DecodeTensorAs(info, data, dtype)
}

// view returns the description and bytes of the tensor named name.
func (s *tensorSet) view(name string) (TensorInfo, []byte, error) {
	if s.closed {
		return TensorInfo{}, nil, pathError(s.source, fs.ErrClosed)
	}
	i, ok := s.byName[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("safetensors: %s: no tensor named %q", s.source, name)
	}
	return s.infos[i], s.views[i], nil
}

// close forgets the views, which are about to become invalid, and reports whether the set
// was already closed.
func (s *tensorSet) close() (wasClosed bool) {
	wasClosed, s.closed, s.views = s.closed, true, nil
	return wasClosed
}
