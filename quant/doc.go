// Package quant does FP8 (E4M3) quantization with static scales.
//
// Weights are stored as FP8 E4M3FN bytes (1 sign bit, 4 exponent bits with bias 7,
// 3 mantissa bits; no infinities; 0x7f and 0xff are NaN; largest finite value 448,
// smallest subnormal 2^-9) together with a float32 scale, per tensor or per output
// channel, so that value ≈ decode(byte) × scale.
//
// The package has two halves that agree bit for bit:
//
//   - A Go codec: [EncodeE4M3] rounds a float32 to the nearest E4M3FN value (ties to
//     even), either like PyTorch's plain cast `x.to(torch.float8_e4m3fn)` (magnitudes
//     that round past 448 become NaN) or saturating to ±448; [DecodeE4M3] and
//     [E4M3DecodeTable] give the exact value of each byte; [EncodeE4M3Slice] and
//     [DecodeE4M3Slice] do whole buffers with a scale.
//   - Graph operations: neither XLA (through go-xla) nor GoMLX's Go backend has a float8
//     dtype, so FP8 tensors live in the graph as uint8 and [DecodeE4M3Node] turns them
//     into exact bfloat16, float16, float32 or float64 values, optionally times a scale,
//     with operations that both backends support: a 256-entry table and a Gather
//     ([DecodeE4M3NodeLUT]), or integer and bit operations ([DecodeE4M3NodeBits]).
//
// On the Go backend an in-graph decode costs tens of nanoseconds per element on every
// execution, so CPU inference is better served by decoding once, at load time, with
// [DecodeE4M3Slice].
package quant
