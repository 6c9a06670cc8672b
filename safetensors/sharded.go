package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"

	"github.com/blockdiff/blockdiff/internal/regularfile"
)

// MaxIndexSize is the largest index file accepted, in bytes: [MaxHeaderSize], far above
// the few megabytes that list the tensors of the largest published checkpoints.
const MaxIndexSize = MaxHeaderSize

// Sharded is a checkpoint split over several safetensors files, the shards, that an index
// file (model.safetensors.index.json) lists, presented as one set of tensors. Like [File],
// its methods are safe for concurrent use, except Close.
type Sharded struct {
	tensorSet
	shards []*File
}

var _ Checkpoint = (*Sharded)(nil)

// OpenSharded opens the checkpoint whose index file is at indexPath, and every shard that
// the index's "weight_map" names, relative to the index's folder. The index and the
// shards must agree exactly: every tensor the index lists must be in the shard it names,
// and every tensor of a shard must be listed for that shard. A tensor that a shard holds
// but the index omits is an error rather than ignored, because it means the index and the
// shards are out of step (a stale index, or shards of two saves mixed), and which copy is
// meant cannot be known.
//
// The index's "metadata" becomes the checkpoint's metadata; values that are not strings,
// such as "total_size", are given as their JSON text. Tensors lists the tensors shard by
// shard, in the order of the shards' file names. The index and the shards must be
// regular files (symbolic links are followed), the index at most [MaxIndexSize] bytes.
func OpenSharded(indexPath string) (_ *Sharded, err error) {
	data, err := regularfile.ReadFile(indexPath, MaxIndexSize)
	if notRegular := (*regularfile.NotRegularError)(nil); errors.As(err, &notRegular) {
		return nil, formatErrorf(indexPath, "", "not a regular file (%s)", notRegular.Kind)
	}
	if errors.Is(err, regularfile.ErrTooLarge) {
		return nil, &FormatError{Path: indexPath, Msg: "index too large", Err: errors.Unwrap(err)}
	}
	if err != nil {
		return nil, pathError("", err)
	}
	idx, err := parseIndex(data, indexPath)
	if err != nil {
		return nil, err
	}
	tensorsByShard := make(map[string][]string)
	for name, shard := range idx.weightMap {
		tensorsByShard[shard] = append(tensorsByShard[shard], name)
	}

	s := &Sharded{}
	defer func() {
		if err != nil {
			for _, f := range s.shards {
				f.Close()
			}
		}
	}()
	var (
		infos []TensorInfo
		views [][]byte
		dir   = filepath.Dir(indexPath)
	)
	for _, shard := range slices.Sorted(maps.Keys(tensorsByShard)) {
		names := tensorsByShard[shard]
		slices.Sort(names)
		f, err := Open(filepath.Join(dir, shard))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &FormatError{Path: indexPath, Tensor: names[0], Msg: fmt.Sprintf("shard %q is missing", shard), Err: err}
		}
		if err != nil {
			return nil, err
		}
		s.shards = append(s.shards, f)
		for _, name := range names {
			if _, ok := f.Lookup(name); !ok {
				return nil, formatErrorf(indexPath, name, "not found in its shard %q", shard)
			}
		}
		for _, t := range f.infos {
			switch listed, ok := idx.weightMap[t.Name]; {
			case !ok:
				return nil, formatErrorf(f.source, t.Name, "present in the shard but absent from index %s", indexPath)
			case listed != shard:
				return nil, formatErrorf(f.source, t.Name, "present in the shard, but index %s assigns it to shard %q", indexPath, listed)
			}
		}
		infos = append(infos, f.infos...)
		views = append(views, f.views...)
	}
	s.tensorSet = newTensorSet(indexPath, idx.metadata, infos, views)
	return s, nil
}

// Path returns the path of the index file the checkpoint was opened with.
func (s *Sharded) Path() string { return s.source }

// Close closes every shard. Views returned by Bytes must not be used afterwards; the
// other methods return an error wrapping fs.ErrClosed.
func (s *Sharded) Close() error {
	if s.close() {
		return pathError(s.source, fs.ErrClosed)
	}
	var errs []error
	for _, f := range s.shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
