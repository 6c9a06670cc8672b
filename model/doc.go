// Package model computes the logits of MiniCPM-family block-diffusion checkpoints
// through GoMLX, on the pure-Go backend or on XLA, as HF transformers would.
//
// Two architectures are supported: MiniCPMForCausalLM (with scale_emb, scale_depth and
// dim_model_base) and LlamaForCausalLM (MiniCPM5). A [Model] holds device-resident
// weights. Most programs need not call this package: [github.com/blockdiff/blockdiff.Load]
// loads a checkpoint and generates text, and package diffusion decodes with a [Model].
//
// # Using a model
//
// [Load] opens a checkpoint folder ([LoadOptions]: compute dtype, [DefaultDType] when
// unset, progress, a [LinearLoader] such as package quant's FP8 one), [FromCheckpoint]
// an open safetensors checkpoint; [LoadConfig] and [ParseConfig] read a config.json
// into a [Config], which [Config.Validate] bounds ([MaxVocabSize] and the other
// limits); [NewRandom] builds any configuration ([MiniCPM5_2B]) with random weights. [Model.Logits] runs one forward pass; [Model.NewSession] returns a
// host-driven [Session]: prefill, a denoise step that reads the cache, and a commit
// that writes it. [Model.WeightBytes] and [Model.CacheBytes] size device memory,
// [Model.Save] writes a checkpoint, and [Model.Close] frees the device ([ErrClosed]).
//
// # Building graphs
//
// For package diffusion, package quant's calibration and power users who run the
// model inside device-side loops of their own: [Model.Forward] builds the forward pass
// over a [Window] of tokens against a KV cache ([CacheNodes]) with block-causal
// attention, reading the weights a [Weights] binds to graph nodes; [Weights.While]
// loops on the device. [Model.Compile] and [Model.CachedProgram] compile a [BuildFunc]
// into a [Program] whose parameters are the caller's inputs followed by the weights
// ([InPlace] donates an input's buffer to an output); [Model.NewCache] allocates the
// [Cache] such programs read and write. The forward pass names the operations a
// backend may run as kernels of its own (model/kernels.go, package internal/kernels);
// backends without such kernels run it as plain GoMLX operations.
//
// # Linear layers
//
// For package quant and other weight formats: every projection is a [Linear]. The
// loader reads each from the checkpoint through a [LinearLoader] ([DenseLoader] by
// default, giving [Dense]), which gets a [LinearSource] and its [CheckpointReader];
// [Model.Linears] lists the loaded layers ([NamedLinear]) so that they can be replaced,
// and [Float32Linear] marks those that return float32 outputs.
//
// # Training
//
// For package train: [Model.TrainableParams] lists the weights ([Param]),
// [Model.BindWeights] binds them to a caller's graph nodes (float32 masters that
// graph.Gradient differentiates), and [Model.ForwardTraining] runs a differentiable
// forward over explicit positions and attention visibility ([TrainingWindow],
// [CausalVisibility]); [WriteCheckpoint] writes checkpoints ([SaveOptions]) that
// [Load] opens.
//
// Shapes in doc comments use: b batch, w window length, s cache capacity, h hidden size,
// v vocabulary, l layers.
package model
