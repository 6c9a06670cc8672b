// Package model computes the logits of MiniCPM-family block-diffusion checkpoints
// through GoMLX, on the pure-Go backend or on XLA, as HF transformers would.
//
// Two architectures are supported: MiniCPMForCausalLM (with scale_emb, scale_depth and
// dim_model_base) and LlamaForCausalLM (MiniCPM5). A [Model] holds device-resident
// weights; its graph functions ([Model.Forward]) build the forward pass over a window of
// tokens against a KV cache with block-causal attention, so that callers (the diffusion
// decoder, calibration) can run it inside their own device-side loops. [Session] wraps
// them for host-driven use: prefill, a denoise step that reads the cache, and a commit
// that writes it. The forward pass names the operations a backend may run as kernels of
// its own (model/kernels.go, package internal/kernels); backends without such kernels
// run it as plain GoMLX operations.
//
// For training, [Model.TrainableParams] lists the weights, [Model.BindWeights] binds them
// to a caller's graph nodes (float32 masters that graph.Gradient differentiates), and
// [Model.ForwardTraining] runs a differentiable forward over explicit positions and
// attention visibility; [Model.Save] and [WriteCheckpoint] write checkpoints that
// [Load] opens.
//
// Shapes in doc comments use: b batch, w window length, s cache capacity, h hidden size,
// v vocabulary, l layers.
package model
