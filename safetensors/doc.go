// Package safetensors reads and writes the safetensors tensor file format used by
// Hugging Face checkpoints.
//
// A safetensors file is an 8-byte little-endian header length, a JSON header that
// describes every tensor (dtype, shape and the byte range of its data) plus an optional
// "__metadata__" object of strings, and then the data section: the raw little-endian,
// row-major bytes of all tensors, which must tile the section exactly.
//
// [Open] maps a file read-only into memory, so opening costs the same whatever the file
// size, and [File.Bytes] hands out views of tensor data without copying. A checkpoint
// split into shards by a "model.safetensors.index.json" file opens with [OpenSharded];
// [OpenCheckpoint] opens a checkpoint folder whichever layout it has. Both kinds present
// the same [Checkpoint] interface, which also converts tensors to []float32 and to GoMLX
// tensors.
//
// [Writer] produces files that the Python and Rust safetensors libraries read, laid out
// the way those libraries lay out their own files.
//
// Headers are validated as strictly as the Rust reference implementation does: every
// error names the file and, where one is concerned, the tensor, and is a [*FormatError]
// when the content is malformed.
package safetensors
