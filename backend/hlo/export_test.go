//go:build cgo && !noxla

package hlo

import (
	"errors"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// WithOptions returns a backend on b's client and device that builds programs with the
// options of list (as after a configuration's plugin path; no client options): the GPU
// tests compare two lowerings on one client, since each client of the CUDA plugin would
// preallocate most of the device's memory. It shares b's client: never finalize it.
// Option triton=pdl holds, as in New, where the device can.
func WithOptions(b *Backend, list string) (*Backend, error) {
	o, err := parseOptions(list)
	if err != nil {
		return nil, err
	}
	if o.client != nil {
		return nil, errors.New("hlo: WithOptions: client options need a client of their own")
	}
	c := &Backend{plugin: b.plugin, client: b.client, device: b.device}
	o.apply(c)
	c.tritonPDL = c.tritonPDL && c.launchesPDL()
	return c, nil
}

// DeviceAddress returns where a buffer of this backend lies in device memory.
func DeviceAddress(b compute.Buffer) (uintptr, error) {
	buf, ok := b.(*Buffer)
	if !ok {
		return 0, errors.New("hlo: not a buffer of this backend")
	}
	if err := buf.valid(); err != nil {
		return 0, err
	}
	p, err := buf.device.UnsafePointer()
	return uintptr(p), err
}

// SetFP8Tiles makes the backend take row for FP8 products of one row, dot for those of
// 2 to 16 rows (W8A8 products' of 2 to 8 too) and manyRows for more (where they divide
// W) until the returned function restores the defaults: the fixture models' weights are
// too small for the defaults, so the GPU tests give them tiles they fit.
func SetFP8Tiles(row, dot, manyRows triton.Tile) (restore func()) {
	saved := [4]triton.Tile{fp8RowTile, fp8DotTile, w8a8DotTile, fp8ManyRowsTile}
	fp8RowTile, fp8DotTile, w8a8DotTile, fp8ManyRowsTile = row, dot, dot, manyRows
	return func() { fp8RowTile, fp8DotTile, w8a8DotTile, fp8ManyRowsTile = saved[0], saved[1], saved[2], saved[3] }
}
