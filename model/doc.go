// Package model computes the logits of MiniCPM-family block-diffusion checkpoints
// through GoMLX, on the pure-Go backend or on XLA, as HF transformers would.
//
// Two architectures are supported: MiniCPMForCausalLM (with scale_emb, scale_depth and
// dim_model_base) and LlamaForCausalLM (MiniCPM5). A [Model] holds device-resident
// weights. Most programs need not call this package: [github.com/blockdiff/blockdiff.Load]
// loads a checkpoint and generates text, and package diffusion decodes with a [Model].
//
// [Load] opens a checkpoint folder ([LoadOptions]: compute dtype, [DefaultDType] when
// unset, progress, and a [LinearLoader] such as package quant's FP8 one),
// [FromCheckpoint] an open safetensors checkpoint; [LoadConfig] and [ParseConfig] read a
// config.json into a [Config], which [Config.Validate] bounds ([MaxVocabSize] and the
// other limits); [NewRandom] builds any configuration ([MiniCPM5_2B]) with random
// weights. [Model.Logits] runs one forward pass; [Model.NewSession] returns a
// host-driven [Session]: prefill, a denoise step that reads the cache, and a commit
// that writes it. [Model.WeightBytes] and [Model.CacheBytes] size device memory,
// [Model.Save] writes a checkpoint, and [Model.Close] frees the device ([ErrClosed]).
//
// The implementation lives in package internal/modelcore, which [Model] wraps in an
// unexported field; packages diffusion, quant and train reach it with modelcore.Of,
// which this package registers at init, so that imports run one way (model → modelcore).
package model
