// Package hlo is a GoMLX compute backend, registered as "bdxla", that builds each program
// as StableHLO with go-xla's public stablehlo package and compiles and runs it on a
// PJRT plugin through go-xla's public pjrt package.
//
// It exists so that chosen operations can be lowered to our own kernels (XLA's
// __gpu$xla.gpu.triton custom call, package backend/hlo/triton), which GoMLX's graph API
// and go-xla's own backend cannot emit. Every operation is plain StableHLO, op for op,
// except where one of our kernels measured faster on the H200 (defaultKernels): dense
// products of a few rows (gemv.go, fp8.go), the operations the model names for it
// (package internal/kernels: the RMSNorm, SwiGLU and residual add around a product,
// fold.go and norm.go; a window's attention inputs and its cache's placements, rope.go
// and place.go; marks.go receives and checks them), and the fused scaled dot-product
// attention, which runs as our kernels for short windows over more keys (attention.go)
// and as cuDNN's flash attention for windows without a cache. The other fused operations
// GoMLX can decompose (softmax, …) are declined with [compute.ErrNotImplemented] so that
// GoMLX decomposes them.
//
// Its configuration is the PJRT plugin's path (or name), optionally followed by options
// after commas ([New] lists them): "preallocate=<bool>", "notf32", and "nokernels", the
// one opt-out of our kernels. For example:
//
//	GOMLX_BACKEND="bdxla:/path/to/xla_cuda_plugin.so,preallocate=true"
//
// Only the plugin's first device is used. [NewBuildOnly] and [NewBuildOnlyWith] make a
// backend that builds programs without a plugin, for tests and for reading the
// StableHLO of a program ([Program]); TestKernelPlan pins the kernels the step programs
// of the MiniCPM5-2B shape run.
//
// Its GPU tests (gpu_test.go, which needs BLOCKDIFF_PJRT_PLUGIN) check every op, the
// fixture models and each kernel against the Go backend or XLA's dot_general, choosing
// kernels one by one through test hooks (export_test.go); package backend picks it for
// a CUDA plugin it finds.
//
// The package needs cgo (for pjrt); without cgo, or with the noxla tag, it is empty.
package hlo
