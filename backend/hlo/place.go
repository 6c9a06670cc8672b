//go:build cgo && !noxla

package hlo

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/go-xla/stablehlo"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// placement is a kernels.TokenInCache (window false): the cache [b, kvHeads, s, d]
// with a one-token window's key or value x [b, 1, kvHeads, d] in slot start[b] of every
// row, or with n set of the rows where n[b] > 0; or a kernels.WindowInCache (window
// true): a window's x [1, w, kvHeads, d] in slots start[0] to start[0]+w-1. placed is
// its result.
type placement struct {
	placed, cache, x, start, n *value
	window                     bool
}

// place keeps p on its result and, with tritonPlace, notes it where it places a
// token in the rows where n is positive (model's write of a one-token window into its
// cache, which our attention kernel may take over) or a window in its slots (the keys
// attended, or the cache's update: placementsOf tells them apart), in the order the
// model names them.
func (bld *Builder) place(p *placement) {
	p.placed.known().placement = p
	if bld.backend.tritonPlace && (p.n != nil || p.window) {
		f := p.placed.fn
		f.placements = append(f.placements, *p)
	}
}

// placementsOf returns, with tritonPlace, the placements that key and value of
// an attention of a's shape are: for one query per row a one-token window placed in its
// slot of the cache in every row (a kernels.TokenInCache without n), for more at batch 1
// its window placed in its slots (a kernels.WindowInCache) where it writes nothing,
// both at the same start. model
// builds a window's cache update apart from the keys it attends (the same update,
// which XLA computes once): a second noted update of the same cache, rows and start
// says that the window writes, and its keys and values stay XLA's, since the update
// reads them from there anyway (taking the fused step's keys from the rows made it
// slower on the H200).
func (f *Function) placementsOf(key, val compute.Value, a triton.Attention) (keys, values placement, ok bool) {
	kv, ok1 := key.(*value)
	vv, ok2 := val.(*value)
	if !f.builder.backend.tritonPlace || !ok1 || !ok2 {
		return placement{}, placement{}, false
	}
	k, v := originOf(kv).placement, originOf(vv).placement
	if k == nil || v == nil || k.window != (a.T > 1) || v.window != (a.T > 1) {
		return placement{}, placement{}, false
	}
	keys, values = *k, *v
	if keys.n != nil || values.n != nil || keys.start != values.start {
		return placement{}, placement{}, false
	}
	if a.T > 1 && (len(f.sameSlots(keys)) > 0 || len(f.sameSlots(values)) > 0) {
		return placement{}, placement{}, false
	}
	return keys, values, true
}

// sameSlots returns the placements noted (Builder.place) other than p that place p's
// rows in p's cache at p's start, in the order noted: the cache's update of a window
// whose keys or values p places (a dynamic update), or of a token's (a select with n).
func (f *Function) sameSlots(p placement) []placement {
	var same []placement
	for _, w := range f.placements {
		if w.placed != p.placed && w.cache == p.cache && w.x == p.x && w.start == p.start {
			same = append(same, w)
		}
	}
	return same
}

// placedWindow returns the attention a (already reading the rows with RotaryRow) with
// Place set, and its cache operands and start, where keys and values, a window placed in
// its slots of the cache as placementsOf found them, are the keys and values of the
// queries' kernels.WindowQKV: the keys rotated with the queries from the same rows, the
// values the columns of those rows after the keys. The kernel then takes keys and
// values from the rows and the cache as it is, and XLA drops the placement (a select or
// a dynamic update), which copied the cache. Where a one-token window's are also
// written into the cache (a placement with n, noted earlier), a has Write set, with n
// as the kernel's written operand, and keys and values hold those placements for the
// kernel's outputs to replace.
func (f *Function) placedWindow(query compute.Value, keys, values placement, a triton.Attention) (_, _ placement, _ triton.Attention, ok bool) {
	q, ok := query.(*value)
	if !ok || a.RotaryRow == 0 {
		return placement{}, placement{}, a, false
	}
	m := originOf(q).qkv
	if m == nil || keys.x != m.keys || values.x != m.values {
		return placement{}, placement{}, a, false
	}
	a.Place, a.ValueColumn = true, (a.Heads+a.KVHeads)*a.D
	// The cache's update of a one-token window is the last noted at its slot.
	kw, vw := f.sameSlots(keys), f.sameSlots(values)
	if a.T == 1 && len(kw) > 0 && len(vw) > 0 && kw[len(kw)-1].n == vw[len(vw)-1].n {
		a.Write = true
		keys, values = kw[len(kw)-1], vw[len(vw)-1]
	}
	return keys, values, a, triton.CheckAttention(a) == nil
}

// placedOperands returns the kernel's cache operands k and v, and start (and n where
// a writes), of placedWindow's placements.
func (f *Function) placedOperands(keys, values placement, a triton.Attention) (k, v *stablehlo.Value, placed []*stablehlo.Value, err error) {
	operands := []compute.Value{keys.cache, values.cache, keys.start}
	if a.Write {
		operands = append(operands, keys.n)
	}
	vs, err := f.operands(operands...)
	if err != nil {
		return nil, nil, nil, err
	}
	return vs[0], vs[1], vs[2:], nil
}
