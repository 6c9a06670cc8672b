// Package hlo is a GoMLX compute backend, registered as "bdxla", that builds each program
// as StableHLO with go-xla's public stablehlo package and compiles and runs it on a
// PJRT plugin through go-xla's public pjrt package.
//
// It exists so that chosen operations can be lowered to our own kernels (XLA's
// __gpu$xla.gpu.triton custom call, package backend/hlo/triton), which GoMLX's graph API
// and go-xla's own backend cannot emit. Every operation is plain StableHLO, op for op,
// except dense products with option triton (below) and the fused scaled dot-product
// attention, which runs as cuDNN's flash attention on a CUDA plugin, or with option
// triton=attention as our own Triton kernels for windows over more keys (attention.go);
// the other fused operations GoMLX can decompose (softmax, …) are declined with
// [compute.ErrNotImplemented] so that GoMLX decomposes them.
//
// Its configuration is the PJRT plugin's path (or name), optionally followed by options
// after commas ([New] lists them): "preallocate=<bool>", "notf32", and the "triton=…" and
// "splitdown=N" options that lower chosen products (gemv.go, fp8.go, fold.go), the
// attention of decoding windows over their cache (attention.go, rope.go, place.go) and
// RMSNorms (norm.go) to our Triton kernels where they measured faster. For example:
//
//	GOMLX_BACKEND="bdxla:/path/to/xla_cuda_plugin.so,preallocate=true,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2"
//
// Only the plugin's first device is used. [NewBuildOnly] and [NewBuildOnlyWith] make a
// backend that builds programs without a plugin, for tests and for reading the
// StableHLO of a program ([Program]).
//
// Its GPU tests (gpu_test.go, which needs BLOCKDIFF_PJRT_PLUGIN) check every op, the
// fixture models and each kernel against the Go backend or XLA's dot_general; package
// backend picks it, with its kernels, for a CUDA plugin it finds.
//
// The package needs cgo (for pjrt); without cgo, or with the noxla tag, it is empty.
package hlo
