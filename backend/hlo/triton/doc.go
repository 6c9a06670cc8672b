// Package triton writes our own Triton kernels for XLA's GPU plugin: hand-written Triton
// IR (TTIR) and the StableHLO custom call, __gpu$xla.gpu.triton, that embeds a kernel in
// a program (the call JAX's Pallas uses). Its kernels:
//
//   - a GEMV for a few rows, y [m, n] = x [m, k] · W [n, k]ᵀ with x and W bfloat16,
//     float32 accumulation and y bfloat16 or float32, as internal/modelcore/linear.go's dense layers
//     compute it; its tiles either keep one accumulator per row of x or (Dot tiles)
//     multiply on the tensor cores;
//   - one-row GEMVs with the work around them folded in: the RMSNorm before
//     (GEMVNormTTIR), the residual add after (GEMVResidualTTIR), and SwiGLU before the
//     down projection with the add after it (GEMVSwiGLUResidualTTIR), or that one with
//     its K loop split over programs that write partial sums (GEMVSwiGLUSplitTTIR),
//     which the GEMVs reading them add in a fixed order as they load them;
//   - a split-key attention of short windows over many keys (AttentionTTIR) and the
//     kernel that combines its splits (AttentionCombineTTIR).
//
// [Kernels] appends them to a StableHLO function; its PDL field has them take part in
// programmatic dependent launch on Hopper, and its Preload field has the o projection's
// GEMV load its weight while the attention before it runs. backend/hlo lowers the
// model's products and attention, and the operations the model names (package
// internal/kernels), to them; its GPU tests check them against XLA's dot. The TTIR generators are plain Go; the custom call needs go-xla's stablehlo
// package, so call.go has the build constraint of the rest of backend/hlo
// (cgo && !noxla).
package triton
