//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// WithOptions returns a backend on b's client and device that builds programs with the
// kernels of list (knobs' form, see parseKnobs): the GPU tests compare two lowerings on
// one client, since each client of the CUDA plugin would preallocate most of the
// device's memory. It shares b's client: never finalize it. Option triton=pdl holds, as
// in New, where the device can.
func WithOptions(b *Backend, list string) (*Backend, error) {
	o, err := parseKnobs(list)
	if err != nil {
		return nil, err
	}
	c := &Backend{plugin: b.plugin, client: b.client, device: b.device, programOptions: o}
	c.tritonPDL = c.tritonPDL && c.launchesPDL()
	return c, nil
}

// NewBuildOnlyWithKernels is NewBuildOnly with the kernels of list only (knobs' form,
// see parseKnobs; "" for none), so that tests see what each changes.
func NewBuildOnlyWithKernels(list string) (*Backend, error) {
	o, err := parseKnobs(list)
	if err != nil {
		return nil, err
	}
	return &Backend{programOptions: o}, nil
}

// PlainBuildOnly is a build-only backend without our kernels (option nokernels).
func PlainBuildOnly() *Backend { return &Backend{} }

// knobs lists parseKnobs' values of triton=.
const knobs = "gemv, gemv-all, attention, fold, pdl, rope, norm, place, preload"

// parseKnobs reads the experiments' form of the kernels a backend runs, none by default,
// comma-separated: "notf32"; "triton=K" for each kernel K of knobs: gemv (our GEMV where
// faster), gemv-all (every product of 1 to 8 rows it takes), attention, fold, pdl, rope
// (with attention), norm, place (with rope), preload (with fold and pdl); and
// "splitdown=N" (with fold), the parts of the AR step's down GEMV's K loop. defaultKernels
// are "triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,
// triton=place,triton=preload,splitdown=2".
func parseKnobs(list string) (programOptions, error) {
	var o programOptions
	if list == "" {
		return o, nil
	}
	for option := range strings.SplitSeq(list, ",") {
		key, value, _ := strings.Cut(option, "=")
		switch key {
		case "notf32":
			o.noTF32 = true
		case "splitdown":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return o, fmt.Errorf("hlo: knob %q: want splitdown=N, N a whole number of parts of at least 1", option)
			}
			o.downSplits = n
		case "triton":
			switch value {
			case "gemv":
				o.tritonGEMV = gemvWhereFaster
			case "gemv-all":
				o.tritonGEMV = gemvAll
			case "attention":
				o.tritonAttention = true
			case "fold":
				o.tritonFold = true
			case "pdl":
				o.tritonPDL = true
			case "rope":
				o.tritonRope = true
			case "norm":
				o.tritonNorm = true
			case "place":
				o.tritonPlace = true
			case "preload":
				o.tritonPreload = true
			default:
				return o, fmt.Errorf("hlo: knob %q: unknown Triton kernels %q (known: %s)", option, value, knobs)
			}
		default:
			return o, fmt.Errorf("hlo: unknown knob %q (known: notf32, splitdown=N, triton=K for K of %s)", option, knobs)
		}
	}
	return o, nil
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
