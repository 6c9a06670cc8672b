package safetensors

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkOpen measures Open and Close of files of growing size. The file is mapped
// rather than read, so the time should not grow with the size.
func BenchmarkOpen(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int64
	}{
		{"64MB", 64 << 20},
		{"2GB", 2 << 30},
		{"4GB", 4 << 30},
	} {
		b.Run(size.name, func(b *testing.B) {
			path := sparseFile(b, size.bytes)
			for b.Loop() {
				f, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sparseFile creates a valid safetensors file whose data section of dataSize bytes holds
// four equal F32 tensors. Only the header is written: the data is a hole, so the file
// takes no disk space.
func sparseFile(b *testing.B, dataSize int64) string {
	const numTensors, cols = 4, 1024
	rows := dataSize / numTensors / 4 / cols
	tensorBytes := rows * cols * 4
	var entries []string
	for i := range int64(numTensors) {
		entries = append(entries, fmt.Sprintf(`"layer.%d.weight":{"dtype":"F32","shape":[%d,%d],"data_offsets":[%d,%d]}`,
			i, rows, cols, i*tensorBytes, (i+1)*tensorBytes))
	}
	header := "{" + strings.Join(entries, ",") + "}"
	header += strings.Repeat(" ", (8-len(header)%8)%8)

	path := filepath.Join(b.TempDir(), "sparse.safetensors")
	content := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	content = append(content, header...)
	if err := os.WriteFile(path, content, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(content))+numTensors*tensorBytes); err != nil {
		b.Fatal(err)
	}
	return path
}
