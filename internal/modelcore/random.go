package modelcore

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
)

// randomStd is the standard deviation of random weights, transformers' initializer_range.
const randomStd = 0.02

// NewRandom builds a model of any configuration with random weights generated on the
// device, so benchmarks can run a real shape (such as [MiniCPM5_2B]) without its
// checkpoint. Linear weights are normal with deviation 0.02; norms are one.
func NewRandom(backend compute.Backend, cfg Config, dtype dtypes.DType, seed int64) (*Model, error) {
	if backend == nil {
		return nil, errNoBackend
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkDType(dtype); err != nil {
		return nil, err
	}
	m := newModel(backend, cfg, dtype)
	gen := randomGenerator{backend: backend, dtype: dtype, seed: seed, execs: map[string]*Exec{}}
	defer gen.finalize()
	h, kvDim := cfg.HiddenSize, (cfg.NumHeads+2*cfg.NumKVHeads)*cfg.HeadDim
	var err error
	normal := func(dims ...int) *tensors.Tensor {
		if err != nil {
			return nil
		}
		var t *tensors.Tensor
		t, err = gen.normal(dims...)
		return t
	}
	m.Embed = normal(cfg.VocabSize, h)
	for range cfg.NumLayers {
		m.Layers = append(m.Layers, Layer{
			AttnNorm: gen.ones(h),
			QKV:      &Dense{normal(kvDim, h)},
			O:        &Dense{normal(h, cfg.NumHeads*cfg.HeadDim)},
			MLPNorm:  gen.ones(h),
			GateUp:   &Dense{normal(2*cfg.IntermediateSize, h)},
			Down:     &Dense{normal(h, cfg.IntermediateSize)},
		})
	}
	m.FinalNorm = gen.ones(h)
	if cfg.TieWordEmbeddings {
		m.Head = &Dense{m.Embed}
	} else {
		m.Head = &Dense{normal(cfg.VocabSize, h)}
	}
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("model: random weights: %w", err)
	}
	return m, nil
}

// newModel returns a model without weights.
func newModel(backend compute.Backend, cfg Config, dtype dtypes.DType) *Model {
	inv := cfg.ropeInvFreq()
	inv32 := make([]float32, len(inv))
	for i, f := range inv {
		inv32[i] = float32(f)
	}
	return &Model{Config: cfg, DType: dtype, backend: backend, ropeInvFreq: tensors.FromValue(inv32), paths: pathsOf(backend)}
}

func checkDType(dtype dtypes.DType) error {
	if dtype != dtypes.Float32 && dtype != dtypes.BFloat16 {
		return fmt.Errorf("model: compute dtype must be Float32 or BFloat16, got %s", dtype)
	}
	return nil
}

// randomGenerator makes random tensors on the device, compiling one graph per shape.
type randomGenerator struct {
	backend compute.Backend
	dtype   dtypes.DType
	seed    int64
	count   int64
	execs   map[string]*Exec
}

func (r *randomGenerator) normal(dims ...int) (*tensors.Tensor, error) {
	shape := shapes.Make(r.dtype, dims...)
	exec, ok := r.execs[shape.String()]
	if !ok {
		var err error
		exec, err = NewExec(r.backend, func(state *Node) *Node {
			_, values := RandomNormal(state, shapes.Make(dtypes.Float32, dims...))
			return ConvertDType(MulScalar(values, randomStd), r.dtype)
		})
		if err != nil {
			return nil, err
		}
		r.execs[shape.String()] = exec
	}
	r.count++
	state, err := RNGStateFromSeed(r.seed*1_000_003 + r.count)
	if err != nil {
		return nil, err
	}
	return exec.Call1(state)
}

func (r *randomGenerator) ones(n int) *tensors.Tensor {
	data := make([]float32, n)
	for i := range data {
		data[i] = 1
	}
	return toDType(tensors.FromValue(data), r.dtype)
}

func (r *randomGenerator) finalize() {
	for _, e := range r.execs {
		e.Finalize()
	}
}

// toDType converts a host float32 tensor to dtype (Float32 or BFloat16).
func toDType(t *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	if dtype == dtypes.Float32 {
		return t
	}
	src := tensors.MustCopyFlatData[float32](t)
	dst := make([]bfloat16.BFloat16, len(src))
	for i, v := range src {
		dst[i] = bfloat16.FromFloat32(v)
	}
	return tensors.FromFlatDataAndDimensions(dst, t.Shape().Dimensions...)
}
