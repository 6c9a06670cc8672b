package diffusion

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// state is the decoder's state on the device, per row of the batch (b rows, block size
// B, capacity s). It is the loop state of the While and the input and output of each
// chunk program.
type state struct {
	seq        *Node // [b, s] int32: prompt, generated tokens and the current block, MASK where masked
	blockStart *Node // [b] int32: first position of the current block
	masked     *Node // [b, B] bool: positions of the current block still masked
	// pending [b] bool. Reference mode: the current block is clean and awaits its
	// commit. Fused mode: the block before the current one awaits its commit, which the
	// next forward performs; the current block holds the anchor guess.
	pending  *Node
	done     *Node // [b] bool
	stopped  *Node // [b] bool: finished on a stop token (else on length)
	forwards *Node // [b] int32
	steps    *Node // [b] int32: denoise steps
	commits  *Node // [b] int32
	remasks  *Node // [b] int32
	// failed [b] bool: the model's logits were not finite (NaN or infinite); the row is
	// done and its tokens mean nothing.
	failed *Node
	cache  *modelcore.CacheNodes
}

// stateShapes lists the shapes of a state's nodes in the order of state.nodes, its
// cache's layers shaped cache.
func stateShapes(m *modelcore.Model, batch, block, capacity int, cache shapes.Shape) []shapes.Shape {
	rowInt := shapes.Make(dtypes.Int32, batch)
	rowBool := shapes.Make(dtypes.Bool, batch)
	list := []shapes.Shape{
		shapes.Make(dtypes.Int32, batch, capacity), rowInt, shapes.Make(dtypes.Bool, batch, block),
		rowBool, rowBool, rowBool, rowInt, rowInt, rowInt, rowInt, rowBool,
	}
	for range 2 * m.Config.NumLayers {
		list = append(list, cache)
	}
	return list
}

// nodes flattens the state; fromNodes is its inverse.
func (s *state) nodes() []*Node {
	return append([]*Node{s.seq, s.blockStart, s.masked, s.pending, s.done, s.stopped,
		s.forwards, s.steps, s.commits, s.remasks, s.failed}, s.cache.Nodes()...)
}

func fromNodes(n []*Node) *state {
	return &state{seq: n[0], blockStart: n[1], masked: n[2], pending: n[3], done: n[4], stopped: n[5],
		forwards: n[6], steps: n[7], commits: n[8], remasks: n[9], failed: n[10], cache: modelcore.CacheNodesFrom(n[numStateNodes:])}
}

// numStateNodes is the number of state nodes besides the cache.
const numStateNodes = 11

// sel returns a where the per-row condition cond [b] holds and b elsewhere.
func sel(cond, a, b *Node) *Node {
	for cond.Rank() < a.Rank() {
		cond = InsertAxes(cond, -1)
	}
	return Where(BroadcastToShape(cond, a.Shape()), a, b)
}

// count adds one where cond [b] holds.
func count(counter, cond *Node) *Node {
	return Add(counter, ConvertDType(cond, dtypes.Int32))
}
