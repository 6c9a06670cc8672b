package modelcore

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/safetensors"
)

// LoadOptions configure [Load].
type LoadOptions struct {
	// DType of activations and dense weights: Float32 or BFloat16. The zero value picks
	// BFloat16 on accelerators and Float32 on the Go backend.
	DType dtypes.DType
	// Linear builds the linear layers; nil loads them dense. Package quant provides FP8
	// loaders.
	Linear LinearLoader
	// Progress, when set, is called after each tensor is on the device with the bytes
	// read so far and in all.
	Progress func(done, total int64)
}

// LinearLoader builds linear layers from checkpoint tensors.
type LinearLoader interface {
	LoadLinear(src *LinearSource) (Linear, error)
}

// LinearSource is what a [LinearLoader] builds one (possibly fused) linear layer from.
type LinearSource struct {
	// Name is the layer's name, e.g. "model.layers.0.self_attn.qkv_proj".
	Name string
	// Parts are the checkpoint modules fused into the layer, in order, e.g.
	// "model.layers.0.self_attn.q_proj"; each has a "<part>.weight" [out, in].
	Parts []string
	// OutFeatures are the output sizes of the parts; InFeatures is the shared input size.
	OutFeatures []int
	InFeatures  int
	// Checkpoint reads tensors, recording which were used.
	Checkpoint *CheckpointReader
	// Backend and DType the layer must compute in.
	Backend compute.Backend
	DType   dtypes.DType
}

// DenseLoader loads linear layers as [Dense] in the compute dtype. It is the default.
type DenseLoader struct{}

// LoadLinear implements [LinearLoader].
func (DenseLoader) LoadLinear(src *LinearSource) (Linear, error) {
	w, err := src.ConcatWeights(src.DType)
	if err != nil {
		return nil, err
	}
	return &Dense{Weight: w}, nil
}

// ConcatWeights reads the parts' weights, checks their shapes, converts them to dtype and
// concatenates them along the output axis into one device tensor [Σout, in].
func (src *LinearSource) ConcatWeights(dtype dtypes.DType) (*tensors.Tensor, error) {
	if len(src.Parts) == 0 || len(src.Parts) != len(src.OutFeatures) {
		return nil, fmt.Errorf("model: layer %s has %d parts and %d output sizes", src.Name, len(src.Parts), len(src.OutFeatures))
	}
	total, err := addInts(src.OutFeatures...)
	if err == nil {
		_, err = mulInts(total, src.InFeatures, dtype.Size())
	}
	if err != nil {
		return nil, fmt.Errorf("model: layer %s: %w", src.Name, err)
	}
	// Every part's shape is checked before the buffer is sized from them.
	for i, part := range src.Parts {
		if _, err := src.Checkpoint.Info(part+".weight", src.OutFeatures[i], src.InFeatures); err != nil {
			return nil, err
		}
	}
	shape := shapes.Make(dtype, total, src.InFeatures)
	data := make([]byte, 0, shape.ByteSize())
	for i, part := range src.Parts {
		b, err := src.Checkpoint.Bytes(part+".weight", dtype, src.OutFeatures[i], src.InFeatures)
		if err != nil {
			return nil, err
		}
		data = append(data, b...)
	}
	return upload(src.Backend, shape, data)
}

// CheckpointReader reads tensors from a checkpoint, checking their shapes and recording
// which were read, so that tensors nobody used can be reported.
type CheckpointReader struct {
	ckpt     safetensors.Checkpoint
	used     map[string]bool
	progress func(int64)
}

// Has reports whether the checkpoint holds a tensor.
func (r *CheckpointReader) Has(name string) bool {
	_, ok := r.ckpt.Lookup(name)
	return ok
}

// Info returns a tensor's description, marking it used; an error names a missing tensor
// or one whose shape differs from dims (when dims are given).
func (r *CheckpointReader) Info(name string, dims ...int) (safetensors.TensorInfo, error) {
	info, ok := r.ckpt.Lookup(name)
	if !ok {
		return info, fmt.Errorf("missing tensor %q", name)
	}
	if dims != nil && !slices.Equal(info.Shape, dims) {
		return info, fmt.Errorf("tensor %q has shape %v, want %v", name, info.Shape, dims)
	}
	r.used[name] = true
	return info, nil
}

// Raw returns a tensor's bytes as stored, after checking its shape.
func (r *CheckpointReader) Raw(name string, dims ...int) (safetensors.TensorInfo, []byte, error) {
	info, err := r.Info(name, dims...)
	if err != nil {
		return info, nil, err
	}
	b, err := r.ckpt.Bytes(name)
	if err == nil && r.progress != nil {
		r.progress(int64(len(b)))
	}
	return info, b, err
}

// Bytes returns a floating-point tensor's values as little-endian dtype bytes (Float32
// or BFloat16), converting when the checkpoint stores another float type.
func (r *CheckpointReader) Bytes(name string, dtype dtypes.DType, dims ...int) ([]byte, error) {
	info, raw, err := r.Raw(name, dims...)
	if err != nil {
		return nil, err
	}
	if info.DType.GoMLXDType() == dtype {
		return raw, nil
	}
	switch info.DType {
	case safetensors.F64, safetensors.F32, safetensors.F16, safetensors.BF16:
	default:
		return nil, fmt.Errorf("tensor %q has dtype %s, want a floating-point weight", name, info.DType)
	}
	t, err := r.ckpt.TensorAs(name, dtype)
	if err != nil {
		return nil, err
	}
	var out []byte
	err = t.ConstBytes(func(data []byte) { out = slices.Clone(data) })
	return out, err
}

// Float32s returns a tensor's values as float32 after checking its shape.
func (r *CheckpointReader) Float32s(name string, dims ...int) ([]float32, error) {
	if _, err := r.Info(name, dims...); err != nil {
		return nil, err
	}
	return r.ckpt.Float32s(name)
}

// unused lists the tensors nobody read, sorted.
func (r *CheckpointReader) unused() []string {
	var names []string
	for _, info := range r.ckpt.Tensors() {
		if !r.used[info.Name] && !strings.HasSuffix(info.Name, ".rotary_emb.inv_freq") {
			names = append(names, info.Name)
		}
	}
	sort.Strings(names)
	return names
}

// upload makes a device tensor from little-endian bytes.
func upload(b compute.Backend, shape shapes.Shape, data []byte) (*tensors.Tensor, error) {
	if int64(len(data)) != shape.ByteSize() {
		return nil, fmt.Errorf("model: %d bytes for a %s tensor (want %d)", len(data), shape, shape.ByteSize())
	}
	return tensors.FromRaw(b, 0, shape, data)
}

// DefaultDType is the compute dtype [Load] picks for a backend: BFloat16 on
// accelerators, Float32 on the Go backend.
func DefaultDType(b compute.Backend) dtypes.DType {
	if backend.RunsLoopsOnDevice(b) {
		return dtypes.BFloat16
	}
	return dtypes.Float32
}

// Load reads a checkpoint folder (config.json and model.safetensors, or shards listed by
// model.safetensors.index.json) and puts its weights on the backend's device. Missing,
// misshapen or unexpected tensors are errors naming them; on error nothing stays
// allocated.
func Load(b compute.Backend, dir string, opts LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer ckpt.Close()
	m, err := FromCheckpoint(b, cfg, ckpt, opts)
	if err != nil {
		return nil, fmt.Errorf("model: loading %s: %w", dir, err)
	}
	return m, nil
}

// FromCheckpoint builds a model of configuration cfg from an open checkpoint. The
// checkpoint's tensor shapes must confirm cfg's numbers before anything is sized from
// them: a mismatch is an error naming the tensor and the config.json fields.
func FromCheckpoint(b compute.Backend, cfg Config, ckpt safetensors.Checkpoint, opts LoadOptions) (_ *Model, err error) {
	if b == nil {
		return nil, errNoBackend
	}
	if ckpt == nil {
		return nil, errors.New("model: no checkpoint")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTensors(cfg, ckpt); err != nil {
		return nil, err
	}
	dtype := opts.DType
	if dtype == dtypes.InvalidDType {
		dtype = DefaultDType(b)
	}
	if err := checkDType(dtype); err != nil {
		return nil, err
	}
	linears := opts.Linear
	if linears == nil {
		linears = DenseLoader{}
	}
	var total, done int64
	for _, info := range ckpt.Tensors() {
		total += info.ByteSize()
	}
	r := &CheckpointReader{ckpt: ckpt, used: map[string]bool{}, progress: func(n int64) {
		done += n
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}}
	m := newModel(b, cfg, dtype)
	defer func() {
		if err != nil {
			_ = m.freeLoaded()
		}
	}()

	h, d := cfg.HiddenSize, cfg.HeadDim
	vector := func(name string, n int) (*tensors.Tensor, error) {
		data, err := r.Bytes(name, dtype, n)
		if err != nil {
			return nil, err
		}
		return upload(b, shapes.Make(dtype, n), data)
	}
	linear := func(name string, parts []string, outs []int, in int) (Linear, error) {
		lin, err := linears.LoadLinear(&LinearSource{Name: name, Parts: parts, OutFeatures: outs, InFeatures: in,
			Checkpoint: r, Backend: b, DType: dtype})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return lin, nil
	}

	embed, err := r.Bytes("model.embed_tokens.weight", dtype, cfg.VocabSize, h)
	if err != nil {
		return nil, err
	}
	if m.Embed, err = upload(b, shapes.Make(dtype, cfg.VocabSize, h), embed); err != nil {
		return nil, err
	}
	for i := range cfg.NumLayers {
		prefix := fmt.Sprintf("model.layers.%d.", i)
		var l Layer
		if l.AttnNorm, err = vector(prefix+"input_layernorm.weight", h); err == nil {
			l.MLPNorm, err = vector(prefix+"post_attention_layernorm.weight", h)
		}
		if err == nil {
			attn := prefix + "self_attn."
			l.QKV, err = linear(linearName(i, "self_attn.qkv_proj"),
				[]string{attn + "q_proj", attn + "k_proj", attn + "v_proj"},
				[]int{cfg.NumHeads * d, cfg.NumKVHeads * d, cfg.NumKVHeads * d}, h)
		}
		if err == nil {
			l.O, err = linear(linearName(i, "self_attn.o_proj"), []string{prefix + "self_attn.o_proj"}, []int{h}, cfg.NumHeads*d)
		}
		if err == nil {
			mlp := prefix + "mlp."
			l.GateUp, err = linear(linearName(i, "mlp.gate_up_proj"), []string{mlp + "gate_proj", mlp + "up_proj"},
				[]int{cfg.IntermediateSize, cfg.IntermediateSize}, h)
		}
		if err == nil {
			l.Down, err = linear(linearName(i, "mlp.down_proj"), []string{prefix + "mlp.down_proj"}, []int{h}, cfg.IntermediateSize)
		}
		m.Layers = append(m.Layers, l)
		if err != nil {
			return nil, err
		}
	}
	if m.FinalNorm, err = vector("model.norm.weight", h); err != nil {
		return nil, err
	}
	if cfg.TieWordEmbeddings {
		m.Head = &Dense{Weight: m.Embed}
		if r.Has("lm_head.weight") {
			// Some exports write the tied head anyway; it must be the embedding's shape.
			if _, err := r.Info("lm_head.weight", cfg.VocabSize, h); err != nil {
				return nil, err
			}
		}
	} else if m.Head, err = linear("lm_head", []string{"lm_head"}, []int{cfg.VocabSize}, h); err != nil {
		return nil, err
	}
	if unused := r.unused(); len(unused) > 0 {
		return nil, fmt.Errorf("unexpected tensor(s) in the checkpoint: %q", unused)
	}
	return m, nil
}

// freeLoaded frees whatever weights a failed load put on the device.
func (m *Model) freeLoaded() error {
	var errs []error
	free := func(ts ...*tensors.Tensor) {
		for _, t := range ts {
			if t != nil {
				errs = append(errs, t.FinalizeAll())
			}
		}
	}
	free(m.Embed, m.FinalNorm)
	for _, l := range m.Layers {
		free(l.AttnNorm, l.MLPNorm)
		for _, lin := range []Linear{l.QKV, l.O, l.GateUp, l.Down} {
			if lin != nil {
				free(lin.Params()...)
			}
		}
	}
	if m.Head != nil {
		free(m.Head.Params()...)
	}
	return errors.Join(errs...)
}
