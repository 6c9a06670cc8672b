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
// after commas (see [New]): "preallocate=<bool>" for the client, "notf32" for float32
// dot products at full precision, and "triton=gemv", which runs dense bfloat16 products
// (x [..., K] · W [N, K]ᵀ, model/linear.go's) as our own Triton GEMV kernel instead of
// stablehlo.dot_general where bench/gpu.sh's triton section measured it faster on the
// H200: one row and W of at least 8 Mi entries (gemv.go; "triton=gemv-all" lowers every
// product of 1 to 8 rows the kernel can compute), and products of up to 32 rows whose
// weight is FP8 bytes that package quant's table decodes, on the bytes themselves
// (fp8.go; W8A8 layers' of 2 to 8 rows as FP8 × FP8 on the tensor cores; at 2 to 32
// rows their K loops split over more programs; past 32 rows XLA's GEMM reads the bytes
// as f8E4M3FN values), and "triton=attention", which runs the
// attention of bfloat16 decoding windows over their cache as our own split-key Triton
// kernel and a second one that combines its splits, at every batch size, and
// "triton=fold", which folds the norms, SwiGLU and residual adds around one-row
// products, bfloat16 or FP8, into those GEMVs (fold.go), and "triton=pdl", which
// launches our kernels under programmatic dependent launch where the device has
// compute capability 9.0 or later, "triton=rope", which has
// our attention kernel rotate one-token windows' queries itself (rope.go),
// "triton=norm", which runs the RMSNorms of several rows, with the residual add before
// them, as our own kernel (norm.go), and "triton=place", which has our attention kernel
// place one-token windows' keys and values in their cache slot and write them there
// itself (place.go), "triton=preload", which has the AR step's o GEMV load its weight
// before its wait while the attention before it runs (fold.go), and "splitdown=2",
// which splits the K loop of the AR step's down
// GEMV over two programs per tile, whose partial sums the GEMVs that read the layer's
// output add in a fixed order (fold.go). For example:
//
//	GOMLX_BACKEND="bdxla:/path/to/xla_cuda_plugin.so,preallocate=true,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2"
//
// Only the plugin's first device is used. [NewBuildOnly] and [NewBuildOnlyWith] make a
// backend that builds programs without a plugin, for tests and for reading the
// StableHLO of a program ([Program]).
//
// Status: validated on an H200 (BENCHMARKS.md, runs S-U, Y and AA-AC): its GPU tests
// (every op, the fixture models and cuDNN's attention against the Go backend, the
// lowered products against dot_general; gpu_test.go, which needs BLOCKDIFF_PJRT_PLUGIN)
// and the fixture tests of packages model, diffusion and quant on it pass. Its steps and
// block decoding take the time XLA's backend's do (within 2 %); with triton=gemv the
// 1-token AR step is 6-8 % faster than XLA's, and prefill, whose boolean mask it hands
// cuDNN as a bias of one head, 4-6 % faster at 2048 tokens; with triton=attention the
// AR step is 8-9 % faster again and the fused step 4-8 % (runs BV-CD). Package backend
// picks it, with triton=gemv, triton=attention, triton=fold, triton=pdl, triton=rope,
// triton=norm and triton=place, for a CUDA plugin it finds.
//
// The package needs cgo (for pjrt); without cgo, or with the noxla tag, it is empty.
package hlo
