// Package diffusion generates text with a block-diffusion checkpoint: each new block
// starts as [anchor, MASK, …], and denoise steps reveal the masked positions whose
// confidence passes a threshold, in parallel, until the block is clean.
//
// The decoder implements docs/decoding.md (the decoding contract) exactly in three modes: [Reference]
// (one forward per denoise step and one per commit), [Fused] (the default: a block's
// commit shares its forward with the next block's first step, remasking when the
// anchor guess was wrong) and [Autoregressive] (block size 1, the speed baseline).
//
// The loop runs on the device: the denoise steps, commits and remasks of one or more
// blocks run inside one XLA While, and the host reads the state back once per
// [Config.BlocksPerReadback] blocks (when streaming, after the first block, then after
// twice as many blocks each time up to that). [Decoder.Generate] returns a whole
// generation, [Decoder.Stream] yields tokens as blocks finish, and [Decoder.GenerateBatch] decodes
// prompts of different lengths together with the same outputs as one by one.
// [Config.Devices] spreads decoding over several GPUs of one host (tensor parallelism,
// partitioned by XLA).
package diffusion
