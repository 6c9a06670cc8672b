// Package triton writes our own Triton kernels for XLA's GPU plugin: hand-written Triton
// IR (TTIR) and the StableHLO custom call, __gpu$xla.gpu.triton, that embeds a kernel in
// a program (the call JAX's Pallas uses). Its one kernel so far is a GEMV for a few rows:
// y [m, n] = x [m, k] · W [n, k]ᵀ with x and W bfloat16, float32 accumulation, and y
// bfloat16 or float32, as model/linear.go's dense layers compute it. Its tiles either
// keep one accumulator per row of x or (Dot tiles) multiply on the tensor cores.
//
// backend/hlo lowers the 1-row dense products of the larger weights to it (option
// triton=gemv; Dot tiles are not used there until measured), and
// bench/tritonprobe checks and times it against XLA's dot on a GPU. The TTIR generator
// is plain Go; the custom call needs go-xla's stablehlo package, so it has the build
// constraint of the rest of backend/hlo (cgo && !noxla).
package triton
