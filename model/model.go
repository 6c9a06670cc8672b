package model

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/safetensors"
)

// Model is a loaded checkpoint: its configuration and its weights, resident on the
// backend's device. Make it with [Load], [FromCheckpoint] or [NewRandom].
type Model struct {
	// Config is the configuration the model was made with.
	Config Config
	// DType is the compute dtype of activations and dense weights: Float32 or BFloat16.
	DType dtypes.DType

	core *modelcore.Model
}

// ErrClosed is the error (wrapped) of using a model after [Model.Close].
var ErrClosed = modelcore.ErrClosed

// LoadOptions configure [Load].
type LoadOptions struct {
	// DType of activations and dense weights: Float32 or BFloat16. The zero value picks
	// BFloat16 on accelerators and Float32 on the Go backend ([DefaultDType]).
	DType dtypes.DType
	// Linear builds the linear layers; nil loads them dense. Package quant's Options
	// loads FP8 ones.
	Linear LinearLoader
	// Progress, when set, is called after each tensor is on the device with the bytes
	// read so far and in all.
	Progress func(done, total int64)
}

// LinearLoader builds a checkpoint's linear layers in a weight format: package quant's
// Options is one, for FP8 layers. Formats are implemented inside this module, where the
// layers' graph code lives.
type LinearLoader = modelcore.LinearLoader

// DefaultDType is the compute dtype [Load] picks for a backend: BFloat16 on
// accelerators, Float32 on the Go backend.
func DefaultDType(b compute.Backend) dtypes.DType { return modelcore.DefaultDType(b) }

// Load reads a checkpoint folder (config.json and model.safetensors, or shards listed by
// model.safetensors.index.json) and puts its weights on the backend's device. Missing,
// misshapen or unexpected tensors are errors naming them; on error nothing stays
// allocated.
func Load(b compute.Backend, dir string, opts LoadOptions) (*Model, error) {
	return wrap(modelcore.Load(b, dir, modelcore.LoadOptions(opts)))
}

// FromCheckpoint builds a model of configuration cfg from an open checkpoint. The
// checkpoint's tensor shapes must confirm cfg's numbers before anything is sized from
// them: a mismatch is an error naming the tensor and the config.json fields.
func FromCheckpoint(b compute.Backend, cfg Config, ckpt safetensors.Checkpoint, opts LoadOptions) (*Model, error) {
	return wrap(modelcore.FromCheckpoint(b, cfg.core(), ckpt, modelcore.LoadOptions(opts)))
}

// NewRandom builds a model of any configuration with random weights generated on the
// device, so benchmarks can run a real shape (such as [MiniCPM5_2B]) without its
// checkpoint. Linear weights are normal with deviation 0.02; norms are one.
func NewRandom(b compute.Backend, cfg Config, dtype dtypes.DType, seed int64) (*Model, error) {
	return wrap(modelcore.NewRandom(b, cfg.core(), dtype, seed))
}

// wrap presents a core model made without error.
func wrap(core *modelcore.Model, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	return &Model{Config: publicConfig(core.Config), DType: core.DType, core: core}, nil
}

// impl is the model's implementation: nil for a nil model, one without a backend for a
// Model not made by this package (whose use is then an error saying so).
func (m *Model) impl() *modelcore.Model {
	switch {
	case m == nil:
		return nil
	case m.core == nil:
		return &modelcore.Model{}
	}
	return m.core
}

func init() {
	// Packages diffusion, quant and train reach the implementation of the models they
	// are given through modelcore.Of.
	modelcore.SetPublic(func(m any) *modelcore.Model {
		pub, ok := m.(*Model)
		if !ok {
			panic(fmt.Sprintf("modelcore.Of: %T is not a *model.Model", m))
		}
		return pub.impl()
	})
}

// Logits runs one forward pass over tokens with block-causal attention of the given
// block size (1 is causal), without a cache, and returns the logits [len(tokens)][v],
// v the vocabulary size.
func (m *Model) Logits(tokens []int, blockSize int) ([][]float32, error) {
	return m.impl().Logits(tokens, blockSize)
}

// WeightBytes is the device memory taken by the weights.
func (m *Model) WeightBytes() int64 { return m.impl().WeightBytes() }

// CacheBytes is the device memory of a KV cache for batch rows of capacity positions
// (a [Session] holds one row).
func (m *Model) CacheBytes(batch, capacity int) int64 { return m.impl().CacheBytes(batch, capacity) }

// SaveOptions configure [Model.Save].
type SaveOptions struct {
	// DType the weights are stored in: BFloat16 (the zero value) or Float32.
	DType dtypes.DType
	// MaxShardBytes, when positive, bounds each safetensors file: weights that do not
	// fit in one file of that size are written as shards with an index
	// (model.safetensors.index.json). A tensor that alone exceeds it is an error.
	MaxShardBytes int64
}

// Save writes the model's configuration and weights into folder dir (created if needed)
// as a transformers checkpoint that [Load] opens, in Hugging Face's layout (fused layers
// split into q_proj, k_proj, v_proj, gate_proj and up_proj; no lm_head when the
// embeddings are tied). Existing files of those names are replaced. Models whose linear
// layers are not dense (quantized ones) are saved by package quant.
func (m *Model) Save(dir string, opts SaveOptions) error {
	return m.impl().Save(dir, modelcore.SaveOptions(opts))
}

// Close frees the device memory of the weights and compiled programs. Using the model
// afterwards is an error wrapping [ErrClosed]; closing it again does nothing.
func (m *Model) Close() error { return m.impl().Close() }

// Session runs one sequence against a KV cache, one forward pass per call, driven from
// the host: [Session.Prefill] writes the prompt's blocks, [Session.Step] runs a block
// against the cache without writing it, and [Session.Commit] writes a finished block.
// The diffusion decoder builds the same passes into device-side loops instead.
type Session struct {
	core *modelcore.Session
}

// NewSession allocates a cache of capacity positions for block-causal attention with
// the given block size.
func (m *Model) NewSession(capacity, blockSize int) (*Session, error) {
	s, err := m.impl().NewSession(capacity, blockSize)
	if err != nil {
		return nil, err
	}
	return &Session{s}, nil
}

// Len is the number of positions in the cache.
func (s *Session) Len() int { return s.core.Len() }

// Close frees the session's cache.
func (s *Session) Close() { s.core.Close() }

// Prefill writes whole blocks of prompt tokens into the cache and returns the logits of
// the last one.
func (s *Session) Prefill(tokens []int) ([]float32, error) { return s.core.Prefill(tokens) }

// Step runs tokens (at most one block, starting a new block) against the cache without
// writing it and returns their logits.
func (s *Session) Step(tokens []int) ([][]float32, error) { return s.core.Step(tokens) }

// Commit writes whole blocks into the cache and returns their logits.
func (s *Session) Commit(tokens []int) ([][]float32, error) { return s.core.Commit(tokens) }
