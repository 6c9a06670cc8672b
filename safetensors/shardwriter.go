package safetensors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// WriteShards writes the tensors into folder dir as shards of at most maxShardBytes each,
// header included, and the index that [OpenSharded] reads: files <base>-00001-of-0000N.safetensors
// and <base>.safetensors.index.json, as transformers names them for base "model" (so that
// [OpenCheckpoint] opens the folder). Tensors fill the shards in the order [Writer.WriteTo]
// lays them out; each shard carries the writer's metadata, and the index's metadata
// holds "total_size", the bytes of tensor data. A tensor that does not fit in a shard
// by itself is an error: tensors are never split. It returns the files written, the
// index last; each is written as [Writer.WriteFile] writes, and an error may leave some.
func (w *Writer) WriteShards(dir, base string, maxShardBytes int64) ([]string, error) {
	order := slices.Clone(w.tensors)
	slices.SortFunc(order, func(a, b pendingTensor) int {
		return cmp.Or(cmp.Compare(b.dtype, a.dtype), cmp.Compare(a.name, b.name))
	})
	var shards []*Writer
	var current *Writer
	var data int64
	for _, t := range order {
		if current != nil {
			current.tensors = append(current.tensors, t)
			if int64(len(current.header(current.tensors)))+data+int64(len(t.data)) <= maxShardBytes {
				data += int64(len(t.data))
				continue
			}
			current.tensors = current.tensors[:len(current.tensors)-1]
		}
		current = &Writer{metadata: w.metadata, tensors: []pendingTensor{t}}
		if size := int64(len(current.header(current.tensors))) + int64(len(t.data)); size > maxShardBytes {
			return nil, fmt.Errorf("safetensors: tensor %q takes %d bytes in a file, more than the shard limit of %d", t.name, size, maxShardBytes)
		}
		data = int64(len(t.data))
		shards = append(shards, current)
	}
	index := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": 0}, map[string]string{}}
	var files []string
	for i, s := range shards {
		name := fmt.Sprintf("%s-%05d-of-%05d.safetensors", base, i+1, len(shards))
		for _, t := range s.tensors {
			index.WeightMap[t.name] = name
			index.Metadata["total_size"] += int64(len(t.data))
		}
		path := filepath.Join(dir, name)
		if err := s.WriteFile(path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	indexJSON, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return files, fmt.Errorf("safetensors: index: %w", err)
	}
	path := filepath.Join(dir, base+".safetensors.index.json")
	if err := writeFileAtomic(path, append(indexJSON, '\n')); err != nil {
		return files, pathError("", err)
	}
	return append(files, path), nil
}

// Size returns the size in bytes of the file [Writer.WriteTo] writes.
func (w *Writer) Size() int64 {
	size := int64(len(w.header(w.tensors))) // the header's length does not depend on the order
	for _, t := range w.tensors {
		size += int64(len(t.data))
	}
	return size
}

// writeFileAtomic writes data to a temporary file beside path and renames it into place.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
