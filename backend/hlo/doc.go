// Package hlo is a GoMLX compute backend, registered as "bdxla", that builds each program
// as StableHLO with go-xla's public stablehlo package and compiles and runs it on a
// PJRT plugin through go-xla's public pjrt package.
//
// It exists so that chosen operations can later be lowered to our own kernels (XLA's
// __gpu$xla.gpu.triton custom call, see bench/tritonprobe), which GoMLX's graph API and
// go-xla's own backend cannot emit. For now every operation is plain StableHLO, op for
// op; fused operations GoMLX can decompose (softmax, scaled dot-product attention, …)
// are declined with [compute.ErrNotImplemented] so that GoMLX decomposes them.
//
// Its configuration is the PJRT plugin's path (or name), optionally followed by
// ",preallocate=<bool>" for the client and ",notf32" for float32 dot products at full
// precision. Only the plugin's first
// device is used. [NewBuildOnly] makes a backend that builds programs without a plugin,
// for tests and for reading the StableHLO of a program ([Program]).
//
// Status: built and unit-tested on CPU for program construction (the programs of the
// model, the cached windows and the decoder's loops build); not yet validated on a GPU
// (see TestCompareWithGo, which needs BLOCKDIFF_PJRT_PLUGIN).
//
// The package needs cgo (for pjrt); without cgo, or with the noxla tag, it is empty.
package hlo
