//go:build xla

package quant

// Built with `-tags xla` (and cgo), the tests and benchmarks can run on XLA, e.g. on a
// CUDA PJRT plugin: GOMLX_BACKEND="xla:/path/to/xla_cuda_plugin.so" go test -tags xla.
import _ "github.com/gomlx/go-xla/compute/xla" // Registers the "xla" backend.
