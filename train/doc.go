// Package train trains the models of package model from token-ids files: the step
// program (forward, loss, gradients, AdamW with a warmup and cosine schedule and
// global-norm clipping) runs as one execution over float32 master weights and optimizer
// state that stay on the device from one step to the next, computing in bfloat16 or
// float32. The loss is pluggable ([Objective]): [NextToken] trains an autoregressive
// model; a block-diffusion conversion plugs its own into the same trainer.
//
// A [Trainer] checkpoints into a folder that model.Load opens (config.json and
// safetensors in Hugging Face's layout, sharded to a size bound) plus the optimizer
// state beside it, from which [Trainer.Restore] resumes exactly. [Evaluate] measures
// the mean loss and bits per byte of held-out text.
//
// With Config.Devices above one, each step spreads over that many devices of the
// backend, data-parallel (package internal/sharding): each device runs its share of the
// batch's rows on its replica of the weights and optimizer state, and XLA's partitioner
// all-reduces the gradients (GoMLX's auto-sharding; go-xla's backend, which
// backend.ForDevices picks for our plugin). Evaluations run on the first device.
//
// Token-ids files (see [ReadTokens]) hold documents concatenated, each as BOS, its
// tokens and EOS. Training rows are windows of them; within a row, attention and
// positions restart at each BOS, so that documents do not see each other.
package train
