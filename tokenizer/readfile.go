package tokenizer

import (
	"fmt"
	"io"

	"github.com/blockdiff/blockdiff/internal/regularfile"
)

// Bounds on the files of a model folder. The largest real tokenizer.json files are a few
// dozen MB. Variables so that tests can lower them.
var (
	maxTokenizerJSONBytes int64 = 1 << 30
	maxConfigBytes        int64 = 64 << 20
	maxChatTemplateBytes  int64 = 1 << 20
)

// readModelFile reads the regular file path, of at most max bytes. Anything else (a FIFO,
// which would block the read until someone writes to it, a device, a directory) is refused
// before it is read.
func readModelFile(path string, max int64) ([]byte, error) {
	return regularfile.ReadFile(path, max)
}

// readAtMost reads r to its end, failing beyond max bytes.
func readAtMost(r io.Reader, max int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than the %d bytes allowed", what, max)
	}
	return data, nil
}
