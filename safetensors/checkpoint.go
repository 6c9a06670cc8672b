package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"
)

// The file names Hugging Face checkpoints use for their weights.
const (
	SingleFileName = "model.safetensors"            // a checkpoint in one file
	IndexFileName  = "model.safetensors.index.json" // the index of a sharded checkpoint
)

// Checkpoint is a set of named tensors read from safetensors files: a single [File] or a
// [Sharded] checkpoint. Tensor names are unique within a checkpoint.
type Checkpoint interface {
	// Metadata returns a copy of the metadata strings; nil when there are none.
	Metadata() map[string]string
	// Tensors returns the descriptions of all tensors, in the order of their data.
	Tensors() []TensorInfo
	// Lookup returns the description of the tensor named name, and whether there is one.
	Lookup(name string) (TensorInfo, bool)
	// Bytes returns the raw little-endian bytes of a tensor without copying them: a
	// read-only view, valid until Close.
	Bytes(name string) ([]byte, error)
	// Float32s returns the values of a tensor converted to float32; see [DecodeFloat32s].
	Float32s(name string) ([]float32, error)
	// Tensor returns a copy of a tensor as a GoMLX tensor; see [DecodeTensor].
	Tensor(name string) (*tensors.Tensor, error)
	// TensorAs returns a tensor as a GoMLX tensor of the given dtype; see [DecodeTensorAs].
	TensorAs(name string, dtype dtypes.DType) (*tensors.Tensor, error)
	// Close releases the files. Views returned by Bytes must not be used afterwards.
	Close() error
}

// OpenCheckpoint opens the checkpoint in folder dir, whichever layout it has: a single
// model.safetensors file (preferred when both exist, as transformers does) or shards
// listed by model.safetensors.index.json.
func OpenCheckpoint(dir string) (Checkpoint, error) {
	f, err := Open(filepath.Join(dir, SingleFileName))
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	s, err := OpenSharded(filepath.Join(dir, IndexFileName))
	if err == nil {
		return s, nil
	}
	var formatErr *FormatError
	if errors.Is(err, fs.ErrNotExist) && !errors.As(err, &formatErr) { // the index itself is missing, not a shard
		return nil, fmt.Errorf("safetensors: %s: neither %s nor %s found: %w", dir, SingleFileName, IndexFileName, fs.ErrNotExist)
	}
	return nil, err
}
