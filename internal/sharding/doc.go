// Package sharding decides how a model's training and decoding spread over N devices of
// one host, as plain data that callers turn into XLA sharding specs: which tensors are
// split along which axis, and which are whole (replicated) on every device. XLA's SPMD
// partitioner then inserts the collectives (NCCL all-reduces on GPUs); nothing here
// moves data.
//
// [DataParallel] is the training plan: each device takes Batch/N rows of every step;
// weights, optimizer state and the step's small state are replicated, and the gradients
// are all-reduced by XLA. [TensorParallel] is the decoding plan: each device holds a
// slice of every layer's attention heads and FFN columns (Megatron-style), so that it
// streams 1/N of the layers' weights per token, with two all-reduces per layer (after
// the o and the down projections); embeddings, the head and the norms are replicated.
//
// [Mesh] and [Spec] turn a plan's decisions into GoMLX's distributed.DeviceMesh and
// distributed.ShardingSpec.
package sharding
