package modelcore

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/sharding"
)

// Logits runs one forward pass over tokens with block-causal attention of the given
// block size (1 is causal), without a cache, and returns the logits [len(tokens)][v].
func (m *Model) Logits(tokens []int, blockSize int) ([][]float32, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if err := m.checkTokens(tokens); err != nil {
		return nil, err
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("model: block size must be at least 1, got %d", blockSize)
	}
	if len(tokens) > m.Config.MaxPositionEmbeddings {
		return nil, fmt.Errorf("model: %d tokens exceed max_position_embeddings %d", len(tokens), m.Config.MaxPositionEmbeddings)
	}
	w := len(tokens)
	key := fmt.Sprintf("logits/%d/%d", w, blockSize)
	p, err := m.CachedProgram(key, []shapes.Shape{shapes.Make(dtypes.Int32, 1, w)}, func(wt *Weights, in []*Node) []*Node {
		start := Zeros(in[0].Graph(), shapes.Make(dtypes.Int32, 1))
		logits, _ := m.Forward(wt, Window{Tokens: in[0], Start: start, BlockSize: blockSize}, nil, nil)
		return []*Node{logits}
	})
	if err != nil {
		return nil, err
	}
	out, err := p.Run(tokensTensor(tokens))
	if err != nil {
		return nil, err
	}
	return logitRows(out[0])
}

// Session runs one sequence against a KV cache, one forward pass per call, driven from
// the host: [Session.Prefill] writes the prompt's blocks, [Session.Step] runs a block
// against the cache without writing it, and [Session.Commit] writes a finished block.
// The diffusion decoder builds the same passes into device-side loops instead.
type Session struct {
	m         *Model
	cache     *Cache
	capacity  int
	blockSize int
	length    int // positions in the cache
	// tp, when set, runs the session's passes tensor-parallel: caches holds each
	// device's share of the cache, and cache is nil.
	tp     *TensorParallel
	caches []*Cache
	// unread has passes free their logits unread and return none: benchmarks that time
	// the device's work without the host's read.
	unread bool
}

// NewSession allocates a cache of capacity positions for block-causal attention with
// the given block size.
func (m *Model) NewSession(capacity, blockSize int) (*Session, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("model: block size must be at least 1, got %d", blockSize)
	}
	cache, err := m.NewCache(1, capacity)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, cache: cache, capacity: capacity, blockSize: blockSize}, nil
}

// NewSession is [Model.NewSession] over the devices: each holds its share of the
// cache, and every pass runs partitioned over them.
func (tp *TensorParallel) NewSession(capacity, blockSize int) (*Session, error) {
	if err := tp.usable(); err != nil {
		return nil, err
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("model: block size must be at least 1, got %d", blockSize)
	}
	m := tp.m
	if err := m.checkCache(1, capacity, tp.Plan.CacheKVHeads()); err != nil {
		return nil, err
	}
	shape := tp.CacheShape(1, capacity)
	if tp.mesh != nil {
		spec, err := sharding.Spec(tp.mesh, shape.Rank(), 1)
		if err != nil {
			return nil, fmt.Errorf("model: the cache's spec: %w", err)
		}
		shape = spec.ShardShape(shape)
	}
	s := &Session{m: m, capacity: capacity, blockSize: blockSize, tp: tp}
	zeros := make([]byte, shape.ByteSize())
	for d := range tp.Devices() {
		list := make([]*tensors.Tensor, 2*m.Config.NumLayers)
		for i := range list {
			t, err := tensors.FromRaw(m.backend, compute.DeviceNum(d), shape, zeros)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("model: allocating a %s cache on device %d: %w", shape, d, err)
			}
			list[i] = t
		}
		s.caches = append(s.caches, CacheFromTensors(list))
	}
	return s, nil
}

// Len is the number of positions in the cache.
func (s *Session) Len() int { return s.length }

// Close frees the session's cache.
func (s *Session) Close() {
	if s.cache != nil {
		s.cache.Free()
	}
	for _, c := range s.caches {
		c.Free()
	}
	s.caches = nil
}

// Prefill writes whole blocks of prompt tokens into the cache and returns the logits of
// the last one.
func (s *Session) Prefill(tokens []int) ([]float32, error) {
	rows, err := s.run("prefill", tokens, true, true)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// Step runs tokens (at most one block, starting a new block) against the cache without
// writing it and returns their logits.
func (s *Session) Step(tokens []int) ([][]float32, error) {
	if len(tokens) > s.blockSize {
		return nil, fmt.Errorf("model: a step takes at most one block (%d tokens), got %d", s.blockSize, len(tokens))
	}
	return s.run("step", tokens, false, false)
}

// Commit writes whole blocks into the cache and returns their logits.
func (s *Session) Commit(tokens []int) ([][]float32, error) {
	return s.run("commit", tokens, true, false)
}

func (s *Session) run(kind string, tokens []int, write, lastOnly bool) ([][]float32, error) {
	m := s.m
	if err := m.checkTokens(tokens); err != nil {
		return nil, err
	}
	if write && len(tokens)%s.blockSize != 0 {
		return nil, fmt.Errorf("model: %s writes whole blocks of %d tokens, got %d", kind, s.blockSize, len(tokens))
	}
	if s.length+len(tokens) > s.capacity {
		return nil, fmt.Errorf("model: %s of %d tokens after %d would overflow the cache of %d positions",
			kind, len(tokens), s.length, s.capacity)
	}
	w := len(tokens)
	key := fmt.Sprintf("session/%s/%d/%d/%d", kind, w, s.capacity, s.blockSize)
	cacheShape := m.CacheShape(1, s.capacity)
	if s.tp != nil {
		cacheShape = s.tp.CacheShape(1, s.capacity)
	}
	vec := shapes.Make(dtypes.Int32, 1)
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, w), vec}
	var inPlace []ProgramOption
	for i := range 2 * m.Config.NumLayers {
		inputs = append(inputs, cacheShape)
		if write {
			// The cache is updated where it lies (see InPlace).
			inPlace = append(inPlace, InPlace(2+i, 1+i))
		}
	}
	build := func(wt *Weights, in []*Node) []*Node {
		win := Window{Tokens: in[0], Start: in[1], CacheLen: in[1], BlockSize: s.blockSize}
		if write {
			win.WriteLen = Const(in[0].Graph(), []int32{int32(w)})
		}
		if lastOnly {
			win.LogitIndices = Const(in[0].Graph(), [][]int32{{int32(w - 1)}})
		}
		logits, cache := m.Forward(wt, win, CacheNodesFrom(in[2:]), nil)
		if !write {
			return []*Node{logits} // An unchanged cache would be copied out.
		}
		return append([]*Node{logits}, cache.Nodes()...)
	}
	if s.tp != nil {
		return s.runDevices(key, inputs, build, inPlace, tokens, write)
	}
	p, err := m.CachedProgram(key, inputs, build, inPlace...)
	if err != nil {
		return nil, err
	}
	args := append([]*tensors.Tensor{tokensTensor(tokens), tensors.FromValue([]int32{int32(s.length)})}, s.cache.Tensors()...)
	out, err := p.Run(args...)
	if err != nil {
		return nil, err
	}
	if write {
		old := s.cache // consumed by the run
		s.cache = CacheFromTensors(out[1:])
		old.Free()
		s.length += w
	}
	return s.logits(out[0])
}

// runDevices runs a pass of [Session.run] tensor-parallel: tokens and start whole on
// every device, the cache split along its heads; the logits come back whole.
func (s *Session) runDevices(key string, inputs []shapes.Shape, build BuildFunc, inPlace []ProgramOption,
	tokens []int, write bool) ([][]float32, error) {
	inAxes := make([]int, len(inputs))
	outAxes := []int{sharding.Replicated}
	for i := range inAxes {
		inAxes[i] = sharding.Replicated
		if i >= 2 {
			inAxes[i] = 1
			if write {
				outAxes = append(outAxes, 1)
			}
		}
	}
	p, err := s.tp.CachedProgram(key, inputs, inAxes, outAxes, build, inPlace...)
	if err != nil {
		return nil, err
	}
	args := make([][]*tensors.Tensor, len(s.caches))
	for d, c := range s.caches {
		args[d] = append([]*tensors.Tensor{tokensTensor(tokens), tensors.FromValue([]int32{int32(s.length)})}, c.Tensors()...)
	}
	out, err := p.RunDevices(args)
	if err != nil {
		return nil, err
	}
	for d := range out {
		if write {
			old := s.caches[d] // consumed by the run
			s.caches[d] = CacheFromTensors(out[d][1:])
			old.Free()
		}
		if d > 0 {
			_ = out[d][0].FinalizeAll()
		}
	}
	if write {
		s.length += len(tokens)
	}
	return s.logits(out[0][0])
}

// logits reads a pass's logits [1, r, v] back to the host, or frees them unread.
func (s *Session) logits(t *tensors.Tensor) ([][]float32, error) {
	if s.unread {
		return nil, t.FinalizeAll()
	}
	return logitRows(t)
}

// checkTokens rejects empty inputs and ids outside the vocabulary, which the embedding
// lookup would otherwise clamp silently.
func (m *Model) checkTokens(tokens []int) error {
	if len(tokens) == 0 {
		return errors.New("model: no tokens")
	}
	for i, t := range tokens {
		if t < 0 || t >= m.Config.VocabSize {
			return fmt.Errorf("model: token %d at index %d is outside the vocabulary of %d", t, i, m.Config.VocabSize)
		}
	}
	return nil
}

func tokensTensor(tokens []int) *tensors.Tensor {
	ids := make([]int32, len(tokens))
	for i, t := range tokens {
		ids[i] = int32(t)
	}
	return tensors.FromFlatDataAndDimensions(ids, 1, len(ids))
}

// logitRows reads logits [1, r, v] back to the host.
func logitRows(t *tensors.Tensor) ([][]float32, error) {
	defer func() { _ = t.FinalizeAll() }()
	dims := t.Shape().Dimensions
	flat, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return nil, fmt.Errorf("model: reading logits: %w", err)
	}
	rows := make([][]float32, dims[1])
	for i := range rows {
		rows[i] = flat[i*dims[2] : (i+1)*dims[2]]
	}
	return rows, nil
}
