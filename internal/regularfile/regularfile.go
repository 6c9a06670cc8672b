package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is what a [*NotRegularError] matches with errors.Is.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError reports a path that is not a regular file, such as a folder, a named
// pipe or a device.
type NotRegularError struct {
	Path string
	Kind string // what it is instead, e.g. "a named pipe"
}

// Error says what the path is.
func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, e.Kind)
}

// Is makes errors.Is(err, ErrNotRegular) hold.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// ErrTooLarge is the error (wrapped) for a file larger than the limit it is read under.
var ErrTooLarge = errors.New("file too large")

// Open opens the regular file at path (symbolic links followed) for reading and returns
// it with its information. Anything else is refused without being opened for reading,
// and the file opened is checked again, so that a pipe swapped in between the two
// checks is refused too rather than blocked on.
func Open(path string) (*os.File, fs.FileInfo, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(path, before); err != nil {
		return nil, nil, err
	}
	// Non-blocking, in case the path was replaced by a pipe since: opening one blocks
	// otherwise. Regular files ignore the flag.
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil {
		err = checkRegular(path, info)
	}
	if err == nil && !os.SameFile(before, info) {
		err = fmt.Errorf("%s: changed while being opened", path)
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// ReadFile reads the regular file at path (see [Open]) if it holds at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, info, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size() > limit {
		return nil, tooLarge(path, info.Size(), limit)
	}
	// The file may grow after Stat: read one byte past the limit to see it.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, int64(len(data)), limit)
	}
	return data, nil
}

func checkRegular(path string, info fs.FileInfo) error {
	if info.Mode().IsRegular() {
		return nil
	}
	kind := "a " + info.Mode().Type().String()
	switch {
	case info.IsDir():
		kind = "a folder"
	case info.Mode()&fs.ModeNamedPipe != 0:
		kind = "a named pipe"
	case info.Mode()&fs.ModeDevice != 0:
		kind = "a device"
	case info.Mode()&fs.ModeSocket != 0:
		kind = "a socket"
	}
	return &NotRegularError{Path: path, Kind: kind}
}

func tooLarge(path string, size, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrTooLarge, size, limit)}
}
