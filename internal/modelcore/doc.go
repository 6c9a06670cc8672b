// Package modelcore implements package model: MiniCPM-family checkpoints loaded onto a
// GoMLX backend and their forward pass, as HF transformers computes it. Package model
// presents what a user calls; this package also exports the plumbing that packages
// diffusion, quant and train build on, and [Of] gives them the implementation of the
// *model.Model a user hands them.
//
// # Building graphs
//
// For package diffusion, package quant's calibration and benchmarks that run the model
// inside device-side loops of their own: [Model.Forward] builds the forward pass over a
// [Window] of tokens against a KV cache ([CacheNodes]) with block-causal attention,
// reading the weights a [Weights] binds to graph nodes; [Weights.While] loops on the
// device. [Model.Compile] and [Model.CachedProgram] compile a [BuildFunc] into a
// [Program] whose parameters are the caller's inputs followed by the weights
// ([InPlace] donates an input's buffer to an output); [Model.NewCache] allocates the
// [Cache] such programs read and write. The forward pass names the operations a
// backend may run as kernels of its own (kernels.go, package internal/kernels);
// backends without such kernels run it as plain GoMLX operations.
//
// # Linear layers
//
// For package quant: every projection is a [Linear]. The loader reads each from the
// checkpoint through a [LinearLoader] ([DenseLoader] by default, giving [Dense]), which
// gets a [LinearSource] and its [CheckpointReader]; [Model.Linears] lists the loaded
// layers ([NamedLinear]) so that they can be replaced, and [Float32Linear] marks those
// that return float32 outputs.
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
// # Tensor parallelism
//
// For decoding over several devices of one host: [Model.TensorParallel] lays the
// weights out by a sharding.TensorParallel plan (each device holds its share of every
// layer's attention heads and FFN columns; embeddings, head and norms whole) on a
// backend that partitions programs (go-xla's, see backend.ForDevices), and its
// sessions ([TensorParallel.NewSession]) run the passes of a [Session] as programs that
// XLA's SPMD partitioner spreads over the devices, inserting the all-reduces after the
// o and down projections; each device holds its key/value heads of the cache.
// [TensorParallel.CachedProgram] compiles other such programs, run with
// [Program.RunDevices]. A model's own programs and sessions are unchanged by it.
//
// Errors start with "model:", the package users call. Shapes in doc comments use: b
// batch, w window length, s cache capacity, h hidden size, v vocabulary, l layers.
package modelcore
