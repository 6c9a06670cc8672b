package safetensors

import (
	"bytes"
	"errors"
	"io/fs"

	"github.com/blockdiff/blockdiff/internal/regularfile"
)

// File is an open safetensors file, mapped read-only into memory. Its methods are safe
// for concurrent use, except Close, after which the views returned by Bytes are invalid.
type File struct {
	tensorSet
	unmap func() error
}

var _ Checkpoint = (*File)(nil)

// Open opens the safetensors file at path and validates its header (see [ReadHeader]).
// The file is mapped into memory rather than read, so opening is fast whatever its size
// and tensor data is only read from disk when used.
//
// Anything but a regular file (symbolic links followed), such as a named pipe, is
// refused before it is opened for reading. The file must not be truncated while open:
// touching data past its new end would crash the program.
func Open(path string) (*File, error) {
	f, stat, err := regularfile.Open(path)
	if notRegular := (*regularfile.NotRegularError)(nil); errors.As(err, &notRegular) {
		return nil, formatErrorf(path, "", "not a regular file (%s)", notRegular.Kind)
	}
	if err != nil {
		return nil, pathError("", err)
	}
	defer f.Close() // the mapping does not need the descriptor
	size := stat.Size()
	if size < 8 {
		// Checked before mapping, which fails on empty files.
		return nil, formatErrorf(path, "", "%d bytes is too short to hold the 8-byte header length", size)
	}
	data, unmap, err := mapFile(f, size)
	if err != nil {
		return nil, pathError(path, err)
	}
	h, err := readHeader(bytes.NewReader(data), size, path)
	if err != nil {
		unmap()
		return nil, err
	}
	views := make([][]byte, len(h.Tensors))
	for i, t := range h.Tensors {
		begin, end := t.FileOffsets()
		views[i] = data[begin:end:end]
	}
	return &File{tensorSet: newTensorSet(path, h.Metadata, h.Tensors, views), unmap: unmap}, nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.source }

// Close unmaps the file. Views returned by Bytes must not be used afterwards; the other
// methods return an error wrapping fs.ErrClosed.
func (f *File) Close() error {
	if f.close() {
		return pathError(f.source, fs.ErrClosed)
	}
	if err := f.unmap(); err != nil {
		return pathError(f.source, err)
	}
	return nil
}
