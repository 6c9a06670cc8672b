//go:build cgo && !noxla

package hlo

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// placement is model's placeToken(cache, x, start, n) (model/attention.go) as
// placementOf recognises it in a select: the cache [b, kvHeads, s, d] with a one-token
// window's key or value x [b, 1, kvHeads, d] in slot start[b] of every row, or with n
// set of the rows where n[b] > 0; or its writeSlots(cache, x, start) as slotsOf
// recognises it in a dynamic update, a window's x [1, w, kvHeads, d] in slots start[0]
// to start[0]+w-1. placed is the select's or the update's result.
type placement struct {
	placed, cache, x, start, n *value
}

// placementOf recognises placeToken's select v = Where(cond, onTrue, cache): onTrue
// the broadcast over the slots of Transpose(x, 0, 2, 1, 3), cond the broadcast over
// the heads and the head dimension of at [b, s] reshaped to [b, 1, s, 1], at either
// Equal(Iota over the slots, start [b] reshaped to [b, 1]) or that and
// GreaterThan(n [b] reshaped to [b, 1], 0).
func placementOf(v *value) (placement, bool) {
	if opOf(v) != compute.OpTypeWhere || v.shape.Rank() != 4 {
		return placement{}, false
	}
	cond, onTrue, cache := v.origin.args[0], v.origin.args[1], v.origin.args[2]
	dims := v.shape.Dimensions
	b, kvHeads, s, d := dims[0], dims[1], dims[2], dims[3]
	if !cache.shape.Equal(v.shape) {
		return placement{}, false
	}
	token := unbroadcast(onTrue)
	if opOf(token) != compute.OpTypeTranspose || !slices.Equal(token.origin.axes, []int{0, 2, 1, 3}) ||
		!slices.Equal(token.shape.Dimensions, []int{b, kvHeads, 1, d}) {
		return placement{}, false
	}
	x := token.origin.args[0]
	at := unbroadcast(cond)
	if opOf(at) != compute.OpTypeReshape || !slices.Equal(at.shape.Dimensions, []int{b, 1, s, 1}) {
		return placement{}, false
	}
	at = at.origin.args[0]
	p := placement{placed: v, cache: cache, x: x}
	if opOf(at) == compute.OpTypeLogicalAnd {
		positive := at.origin.args[1]
		at = at.origin.args[0]
		if opOf(positive) != compute.OpTypeGreaterThan {
			return placement{}, false
		}
		if p.n = perRow(positive.origin.args[0], b); p.n == nil || !isIntZero(positive.origin.args[1]) {
			return placement{}, false
		}
	}
	if opOf(at) != compute.OpTypeEqual || !slices.Equal(at.shape.Dimensions, []int{b, s}) {
		return placement{}, false
	}
	slots := unbroadcast(at.origin.args[0])
	if opOf(slots) != compute.OpTypeIota || slots.shape.DType != dtypes.Int32 ||
		!slices.Equal(slots.shape.Dimensions, []int{1, s}) || !slices.Equal(slots.origin.axes, []int{1}) {
		return placement{}, false
	}
	if p.start = perRow(at.origin.args[1], b); p.start == nil {
		return placement{}, false
	}
	return p, true
}

// slotsOf recognises model's writeSlots(cache, x, start) (model/attention.go) at batch
// 1 as a placement: v = DynamicUpdateSlice(cache [1, kvHeads, s, d],
// Transpose(x, 0, 2, 1, 3), 0, 0, Reshape(start [1]), 0), the cache with a window's keys
// or values x [1, w, kvHeads, d] in slots start to start+w-1.
func slotsOf(v *value) (placement, bool) {
	if opOf(v) != compute.OpTypeDynamicUpdateSlice || v.shape.Rank() != 4 || v.shape.Dimensions[0] != 1 ||
		len(v.origin.args) != 6 {
		return placement{}, false
	}
	cache, window, at := v.origin.args[0], v.origin.args[1], v.origin.args[2:]
	if opOf(window) != compute.OpTypeTranspose || !slices.Equal(window.origin.axes, []int{0, 2, 1, 3}) {
		return placement{}, false
	}
	if !isIntZero(at[0]) || !isIntZero(at[1]) || !isIntZero(at[3]) || opOf(at[2]) != compute.OpTypeReshape {
		return placement{}, false
	}
	start := at[2].origin.args[0]
	if start.shape.DType != dtypes.Int32 || !slices.Equal(start.shape.Dimensions, []int{1}) {
		return placement{}, false
	}
	return placement{placed: v, cache: cache, x: window.origin.args[0], start: start}, true
}

// unbroadcast follows v back through broadcasts that keep its rank.
func unbroadcast(v *value) *value {
	for opOf(v) == compute.OpTypeBroadcastInDim && v.origin.args[0].shape.Rank() == v.shape.Rank() {
		v = v.origin.args[0]
	}
	return v
}

// perRow returns the int32 [b] value that v, [b, 1] broadcast or not, reshapes, or nil.
func perRow(v *value, b int) *value {
	v = unbroadcast(v)
	if opOf(v) != compute.OpTypeReshape || !slices.Equal(v.shape.Dimensions, []int{b, 1}) {
		return nil
	}
	if r := v.origin.args[0]; r.shape.DType == dtypes.Int32 && slices.Equal(r.shape.Dimensions, []int{b}) {
		return r
	}
	return nil
}

// isIntZero reports whether v is an int32 constant 0, broadcast or not.
func isIntZero(v *value) bool {
	for opOf(v) == compute.OpTypeBroadcastInDim || opOf(v) == compute.OpTypeReshape {
		v = v.origin.args[0]
	}
	return v != nil && v.shape.DType == dtypes.Int32 && opOf(v) == compute.OpTypeConstant &&
		v.origin.scalar != nil && *v.origin.scalar == 0
}

// notePlacement keeps v, with option triton=place, where it places a token in the rows
// where n is positive (model's write of a one-token window into its cache, which our
// attention kernel may take over) or a window in its slots by a dynamic update (the
// keys attended, or the cache's update: placementsOf tells them apart).
func (f *Function) notePlacement(v compute.Value) {
	x, ok := v.(*value)
	if !ok || !f.builder.backend.tritonPlace {
		return
	}
	if p, ok := placementOf(x); ok && p.n != nil {
		f.placements = append(f.placements, p)
	}
	if p, ok := slotsOf(x); ok {
		f.placements = append(f.placements, p)
	}
}

// placementsOf returns, with option triton=place, the placements that key and value of
// an attention of a's shape are: for one query per row model's one-token window placed
// in its slot of the cache in every row (placementOf), for more at batch 1 its window
// placed in its slots (slotsOf) where it writes nothing, both at the same start. model
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
	recognise := placementOf
	if a.T > 1 {
		recognise = slotsOf
	}
	keys, ok1 = recognise(kv)
	values, ok2 = recognise(vv)
	if !ok1 || !ok2 || keys.n != nil || values.n != nil || keys.start != values.start {
		return placement{}, placement{}, false
	}
	if a.T > 1 && (len(f.sameSlots(keys)) > 0 || len(f.sameSlots(values)) > 0) {
		return placement{}, placement{}, false
	}
	return keys, values, true
}

// sameSlots returns the placements noted (notePlacement) other than p that place p's
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
// Place set, and its cache operands and start, where keys and values, model's window
// placed in its slots of the cache as placementsOf found them, hold: the keys
// rotated with the queries from the same rows, the values the slice of those rows after
// the keys. The kernel then takes keys and values from the rows and the cache as it is,
// and XLA drops the placement (a select or a dynamic update), which copied the cache.
// Where a one-token window's key and value are also written into the cache (a
// placement with n, noted earlier), a has Write set, with n as the kernel's written
// operand, and keys and values hold those placements for the kernel's outputs to
// replace.
func (f *Function) placedWindow(query compute.Value, keys, values placement, a triton.Attention) (_, _ placement, _ triton.Attention, ok bool) {
	q, ok := query.(*value)
	if !ok || a.RotaryRow == 0 {
		return placement{}, placement{}, a, false
	}
	// The queries' rotation: q = Transpose(Slice(qk, heads 0:Heads)), x = the slice of
	// qk's key heads, Heads:Heads+KVHeads.
	qk := q.origin.args[0].origin.args[0]
	if !isSliceOf(keys.x, qk, []int{0, 0, a.Heads, 0}) {
		return placement{}, placement{}, a, false
	}
	// The rows: qk rotates Reshape(Slice(qkv, columns 0:(Heads+KVHeads)·D)); the value
	// is Reshape(Slice(qkv, the KVHeads·D columns after those)).
	unrotated, _, _, _ := rotatedQuery(q)
	if opOf(unrotated) != compute.OpTypeReshape || opOf(unrotated.origin.args[0]) != compute.OpTypeSlice {
		return placement{}, placement{}, a, false
	}
	qkv := unrotated.origin.args[0].origin.args[0]
	column := (a.Heads + a.KVHeads) * a.D
	if opOf(values.x) != compute.OpTypeReshape || !isSliceOf(values.x.origin.args[0], qkv, []int{0, 0, column}) ||
		values.x.origin.args[0].shape.Dimensions[2] != a.KVHeads*a.D {
		return placement{}, placement{}, a, false
	}
	a.Place, a.ValueColumn = true, column
	// The cache's update of a one-token window is the last noted at its slot.
	kw, vw := f.sameSlots(keys), f.sameSlots(values)
	if a.T == 1 && len(kw) > 0 && len(vw) > 0 && kw[len(kw)-1].n == vw[len(vw)-1].n {
		a.Write = true
		keys, values = kw[len(kw)-1], vw[len(vw)-1]
	}
	return keys, values, a, triton.CheckAttention(a) == nil
}

// isSliceOf reports whether v is a slice of strides 1 of x from starts.
func isSliceOf(v, x *value, starts []int) bool {
	return opOf(v) == compute.OpTypeSlice && v.origin.args[0] == x && slices.Equal(v.origin.starts, starts)
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
