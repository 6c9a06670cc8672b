package safetensors

import (
	"fmt"
	"strings"
)

// FormatError reports malformed content: a header or an index that breaks the format's
// rules, or data that does not match them.
type FormatError struct {
	Path   string // the file concerned; empty for content read through ReadHeader
	Tensor string // the tensor concerned; empty when the problem is not one tensor's
	Msg    string // what is wrong
	Err    error  // the underlying error, such as a JSON syntax error; may be nil
}

// Error formats the problem with the file and tensor it concerns.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *FormatError) Unwrap() error { return e.Err }

// formatErrorf returns a *FormatError whose message is formatted from format and args.
func formatErrorf(path, tensor string, format string, args ...any) *FormatError {
	return &FormatError{Path: path, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
}

// pathError wraps an error that is not about the content, such as an I/O error, with the
// package name and, when known, the file.
func pathError(path string, err error) error {
	if path == "" {
		return fmt.Errorf("safetensors: %w", err)
	}
	return fmt.Errorf("safetensors: %s: %w", path, err)
}
