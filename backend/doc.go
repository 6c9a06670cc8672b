// Package backend picks the compute backend blockdiff runs on, in one place.
//
// XLA on CUDA is chosen when a CUDA PJRT plugin is found, through our own StableHLO
// backend (package backend/hlo), which runs our kernels where they measured faster
// (see [Select]; PERFORMANCE.md has the figures); otherwise GoMLX's pure-Go backend.
// The one opt-out of our kernels is option nokernels, e.g.
// GOMLX_BACKEND="bdxla:/path/to/plugin.so,preallocate=true,nokernels" (XLA's own ops;
// go-xla's backend, "xla:…", runs those too). The order of precedence is:
//
//  1. BLOCKDIFF_PJRT_PLUGIN: the absolute path of a PJRT plugin (.so) to load.
//  2. GOMLX_BACKEND: any GoMLX backend configuration, used as given (e.g. "go", or
//     "xla:/path/to/plugin.so,preallocate=true" for go-xla's own backend).
//  3. Auto-detection of the CUDA plugin of the `jax-cuda13-pjrt` Python package
//     (jax_plugins/xla_cuda13/xla_cuda_plugin.so) in the machine's Python
//     site-packages folders, when an NVIDIA device is present.
//  4. The Go backend with one executor ("go:num_executors=1"), which runs anywhere.
//
// Nothing is ever downloaded. [New] returns a [Choice] saying what was picked and why.
package backend
