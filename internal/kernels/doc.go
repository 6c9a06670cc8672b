// Package kernels is the contract between the model and the backends that run parts of
// it as kernels of their own: every operation of the model that a backend may
// accelerate, by name, what it computes, who asks for it and who implements it. It is
// the one place that says which of the model's work a backend may take over.
//
// # How an operation travels
//
// GoMLX's graph carries to a backend only the operations of package compute. Of its
// fused operations the model asks for FusedScaledDotProductAttention (internal/modelcore/attention.go:
// a prefill's attention, and a decoding window's attention over its cache), which a
// backend implements or declines. The others do not fit the model: FusedDense returns
// its input's dtype, where the model's layers return float32 from bfloat16 inputs;
// FusedActivation with ActivationSwiGLU and FusedLayerNorm (a LayerNorm, not an
// RMSNorm) would hand the Go backend its own fused loops, changing its numbers;
// FusedQuantizedDense has no FP8 scheme. Nor can they express the work our kernels fold
// around a product (a norm before it, a residual add after it).
//
// The operations named here take their place. For each, the model (or package quant,
// for its FP8 layers) builds the plain decomposition that every backend runs, then
// names it with [Mark]: the values it made and what they are, before the operation
// that completes it, if it has one ([NormedDense], [FP8Dense] and [ResidualAdd] are
// completed by a product or a sum of two of their values; the others describe a value
// that later operations read). A backend that implements [Backend] (backend/hlo) may
// then build a kernel of its own in place of the completing operation, or have a kernel
// read the named values where they were made; it checks each mark strictly: a mark
// whose values do not have the shapes its type documents, or a completing operation
// never built, is an error. Every other backend ignores the marks and runs the
// decomposition as built, so its numbers do not depend on them.
//
// # The operations
//
// Each type's doc gives its definition. Who marks them, and backend/hlo's kernels for
// them (package backend/hlo/triton); backend/hlo without kernels, the Go backend and
// go-xla's run the decomposition:
//
//   - [NormedDense]: model (normedDense, internal/modelcore/kernels.go); one row: GEMVNorm; several
//     rows: RowNorm (with the residual add before it, [ResidualAdd]) then the product.
//   - [NormalisedRow]: model (normalisedRow); read by [FP8Dense]'s kernels: GEMVNorm
//     with the norm before the product (one row), RowNorm returning the row (several).
//   - [FP8Dense]: quant (FP8Linear.ApplyFloat32); as [NormedDense] where its input is a
//     [NormalisedRow]; else a plain product, whose output [ResidualAdd] may fold.
//   - [E4M3Decoded]: quant (its table decoder); products by such a weight (and W8A8
//     inputs) run our GEMV on the bytes, or XLA's GEMM on them as f8E4M3FN.
//   - [ResidualAdd]: model (residualAdd); one row: GEMVResidual, or
//     GEMVSwiGLUResidual / GEMVSwiGLUSplit where the product's input is [SwiGLU].
//   - [SwiGLU]: model (swiGLUInput); read by [ResidualAdd]'s kernels.
//   - [WindowQKV]: model (windowQKV); our attention kernel (AttentionOutput) rotates
//     the queries from the rows, and with [TokenInCache] or [WindowInCache] takes the
//     keys and values from them too.
//   - [TokenInCache], [WindowInCache]: model (tokenInCache, windowInCache); our
//     attention kernel attends over the cache as it was and writes a token's key and
//     value into it itself.
//
// Which kernels the step programs of the MiniCPM5-2B shape run is pinned by
// backend/hlo's TestKernelPlan, so that a change of the model or of the backend that
// drops one fails there.
package kernels
