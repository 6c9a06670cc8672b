package modelcore

import (
	"fmt"

	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
)

// Cache is a KV cache on the device: per layer, keys and values shaped
// [b, kvHeads, s, headDim] in the compute dtype, slot i holding position i of each row.
//
// Invariant: at batch 2 and more, and on backends that do not fuse elementwise work,
// slots at or beyond a row's committed length are zero: writes add into them, so every
// slot must be written once (a window that adds uncommitted keys for its attention
// subtracts them again). At batch 1 on backends that fuse elementwise work, a
// window of several tokens that reads and writes the cache overwrites its slots and
// leaves keys of positions it did not commit past the committed length (see
// Window.WriteLen). A forward pass that writes nothing leaves the cache unchanged.
type Cache struct {
	K, V []*tensors.Tensor
}

// CacheNodes is a [Cache] inside a graph.
type CacheNodes struct {
	K, V []*Node
}

// CacheShape is the shape of one layer's keys or values.
func (m *Model) CacheShape(batch, capacity int) shapes.Shape {
	c := m.Config
	return shapes.Make(m.DType, batch, c.NumKVHeads, capacity, c.HeadDim)
}

// CacheBytes is the device memory of a cache for batch rows of capacity positions.
func (m *Model) CacheBytes(batch, capacity int) int64 {
	return 2 * int64(m.Config.NumLayers) * m.CacheShape(batch, capacity).ByteSize()
}

// NewCache allocates a zeroed cache for batch rows of capacity positions.
func (m *Model) NewCache(batch, capacity int) (*Cache, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if err := m.checkCache(batch, capacity, m.Config.NumKVHeads); err != nil {
		return nil, err
	}
	shape := m.CacheShape(batch, capacity)
	// Zeros are made on the device: a host-side zero tensor would be copied over.
	ts, err := CallOnceN(m.backend, func(g *Graph) []*Node {
		out := make([]*Node, 2*m.Config.NumLayers)
		for i := range out {
			out[i] = Zeros(g, shape)
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("model: allocating a %s cache (%d bytes): %w", shape, m.CacheBytes(batch, capacity), err)
	}
	return CacheFromTensors(ts), nil
}

// checkCache checks the batch and capacity of a cache of kvHeads key/value heads.
func (m *Model) checkCache(batch, capacity, kvHeads int) error {
	if batch <= 0 || capacity <= 0 {
		return fmt.Errorf("model: cache needs a positive batch and capacity, got %d and %d", batch, capacity)
	}
	if capacity > m.Config.MaxPositionEmbeddings {
		return fmt.Errorf("model: cache capacity %d exceeds max_position_embeddings %d",
			capacity, m.Config.MaxPositionEmbeddings)
	}
	c := m.Config
	if _, err := mulInts(2, c.NumLayers, batch, kvHeads, capacity, c.HeadDim, m.DType.Size()); err != nil {
		return fmt.Errorf("model: the size of a cache of %d rows of %d positions: %w", batch, capacity, err)
	}
	return nil
}

// Tensors lists the cache tensors: all keys, then all values.
func (c *Cache) Tensors() []*tensors.Tensor {
	return append(append([]*tensors.Tensor(nil), c.K...), c.V...)
}

// CacheFromTensors is the inverse of [Cache.Tensors].
func CacheFromTensors(ts []*tensors.Tensor) *Cache {
	n := len(ts) / 2
	return &Cache{K: ts[:n], V: ts[n:]}
}

// Free releases the cache's device memory.
func (c *Cache) Free() {
	for _, t := range c.Tensors() {
		_ = t.FinalizeAll()
	}
	c.K, c.V = nil, nil
}

// Nodes lists the cache nodes: all keys, then all values.
func (c *CacheNodes) Nodes() []*Node {
	return append(append([]*Node(nil), c.K...), c.V...)
}

// CacheNodesFrom is the inverse of [CacheNodes.Nodes].
func CacheNodesFrom(nodes []*Node) *CacheNodes {
	n := len(nodes) / 2
	return &CacheNodes{K: nodes[:n], V: nodes[n:]}
}
