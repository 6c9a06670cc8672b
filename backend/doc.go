// Package backend picks the compute backend blockdiff runs on, in one place.
//
// XLA on CUDA is chosen when a CUDA PJRT plugin is found, otherwise GoMLX's pure-Go
// backend. The order of precedence is:
//
//  1. BLOCKDIFF_PJRT_PLUGIN: the absolute path of a PJRT plugin (.so) to load with XLA.
//  2. GOMLX_BACKEND: any GoMLX backend configuration, used as given (e.g. "go",
//     "xla:/path/to/plugin.so,preallocate=true", or "bdxla:/path/to/plugin.so" for our own
//     StableHLO backend, package backend/hlo, whose option triton=gemv runs 1-row dense
//     products of the larger weights as our own Triton kernel: autoregressive decoding
//     7 % faster at batch 1, the rest as fast as XLA's backend; see BENCHMARKS.md).
//  3. Auto-detection of the CUDA plugin of the `jax-cuda13-pjrt` Python package
//     (jax_plugins/xla_cuda13/xla_cuda_plugin.so) in the machine's Python
//     site-packages folders, when an NVIDIA device is present.
//  4. The Go backend with one executor ("go:num_executors=1"), which runs anywhere.
//
// Nothing is ever downloaded. [New] returns a [Choice] saying what was picked and why.
package backend
