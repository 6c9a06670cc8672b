// Package backend picks the compute backend blockdiff runs on, in one place.
//
// XLA on CUDA is chosen when a CUDA PJRT plugin is found, through our own StableHLO
// backend (package backend/hlo,
// "bdxla:PLUGIN,preallocate=true,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2": its Triton
// GEMVs run 1-row dense products of the larger weights, autoregressive decoding 7 %
// faster at batch 1; its Triton attention runs windows over the cache at every batch
// size (at batch 1 the AR step 8-9 % faster, the fused step 4-8 %); the norms, SwiGLU
// and residual adds around 1-row products run inside its GEMVs (the AR step 5 % faster
// again), and its kernels hand over to each other by programmatic dependent launch on
// Hopper (3-4 % again), and its attention kernel rotates one-token windows' queries
// itself (the AR step 1.8 % faster again); the RMSNorms of several rows run as its own
// kernel (the 4- and 8-token steps 1-2 % faster, prefill 1-3 %), and its attention
// kernel places one-token windows' keys and values and writes them into the cache (the
// AR step 3 % faster again), its o GEMV at the AR step loads its weight while the
// attention before it runs (1.6-2.1 % again), and its down GEMV there splits its K loop
// over twice the programs (1 % again); the rest is as fast as
// go-xla's backend; see BENCHMARKS.md),
// otherwise GoMLX's pure-Go backend. The order of precedence is:
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
