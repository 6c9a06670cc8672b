//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/pjrt"

	"github.com/blockdiff/blockdiff/backend/hlo/triton"
)

// BackendName is the name the backend registers under with [compute.Register]
// (go-xla registers its own backend as "xla" and under the aliases "hlo", "shlo" and
// "stablehlo", so ours needs a name of its own).
const BackendName = "bdxla"

// ErrBuildOnly is returned where a backend made by [NewBuildOnly] would have to run
// something.
var ErrBuildOnly = errors.New("hlo: this backend only builds programs (NewBuildOnly); it cannot run them")

func init() {
	compute.Register(BackendName, func(config string) (compute.Backend, error) {
		b, err := New(config)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return b, nil
	})
}

// Backend runs programs built as StableHLO on the first device of a PJRT plugin. It
// implements [compute.Backend].
type Backend struct {
	plugin *pjrt.Plugin // nil for a build-only backend
	client *pjrt.Client // nil for a build-only backend
	device *pjrt.Device // the device every buffer and execution uses
	programOptions
	finalized bool
}

// programOptions are the options that change how a backend builds programs.
type programOptions struct {
	noTF32     bool       // float32 dot products at full precision (option "notf32")
	tritonGEMV gemvPolicy // which dense bf16 products run our Triton GEMV (option "triton", gemv.go)
	// tritonAttention runs the fused attentions of short windows over more keys as our
	// Triton kernels (option "triton=attention", attention.go).
	tritonAttention bool
	// tritonFold folds the RMSNorm before a dense layer of one row, and the SwiGLU and
	// residual add around one, into our Triton GEMVs (option "triton=fold", fold.go).
	tritonFold bool
	// tritonPDL launches our Triton kernels with programmatic dependent launch (option
	// "triton=pdl", where the device can: see [triton.Kernels]).
	tritonPDL bool
	// tritonRope folds the rotation of the queries into our attention kernel (option
	// "triton=rope", rope.go).
	tritonRope bool
	// tritonNorm runs the RMSNorm before a dense layer of several rows, with the
	// residual add before it, as our Triton kernel (option "triton=norm", norm.go).
	tritonNorm bool
	// tritonPlace has our attention kernel place windows' keys and values in their
	// cache slots itself, and one-token windows' write them there (option
	// "triton=place", place.go).
	tritonPlace bool
	// tritonPreload has the o projection's GEMV of the AR step at batch 1 load its
	// weight while the attention before it runs (option "triton=preload", fold.go and
	// triton.Kernels.Preload).
	tritonPreload bool
	// downSplits is how many programs split each tile's K loop in the AR step's down
	// GEMV (option "splitdown=N", fold.go); 0 or 1 for none.
	downSplits int
}

var _ compute.Backend = (*Backend)(nil)

// New loads the PJRT plugin that config names (a path, or a name pjrt resolves), with
// options after commas. Our Triton kernels replace XLA's ops only where each measured
// faster on the H200, and decline the shapes they do not take:
//   - "preallocate=<bool>", the client's;
//   - "notf32": float32 products at full precision, not TF32 (the exact fixture tests);
//   - "triton=gemv": dense products as our GEMV where faster: bf16 of one row and a W of
//     8 Mi entries or more, FP8 bytes up to 32 rows, W8A8 of 2 to 8 rows ([Function.DotGeneral]);
//   - "triton=gemv-all": every product of 1 to 8 rows the GEMV can take (tests, measurements);
//   - "triton=attention": windows of up to 64 query rows per key/value head over the
//     cache as our attention kernels ([Backend.FusedAttentionOverCache]);
//   - "triton=fold": the RMSNorm before, SwiGLU and the residual add after one-row
//     products folded into their GEMVs (fold.go);
//   - "triton=pdl": our kernels under programmatic dependent launch (compute capability 9.0+);
//   - "triton=rope": with triton=attention, one-token windows' queries rotated inside our
//     attention kernel (rope.go);
//   - "triton=norm": the RMSNorm of several rows, with the add before it, as one kernel (norm.go);
//   - "triton=place": with triton=rope, our attention kernel takes windows' keys and values
//     from the qkv rows and writes one-token windows' into the cache (place.go,
//     [Backend.PlacesWindows]);
//   - "triton=preload": with fold and pdl, the AR step's o GEMV loads its weight while the
//     attention before it runs (triton.Kernels.Preload);
//   - "splitdown=N": with fold, the AR step's down GEMV splits its K loop over N programs,
//     the partial sums added in a fixed order by the GEMVs that read them (fold.go).
//
// Backend selection on CUDA uses every option but triton=gemv-all and notf32, with
// splitdown=2 (backend.Select). Unknown options are errors.
func New(config string) (*Backend, error) {
	path, optionList, _ := strings.Cut(config, ",")
	if path == "" {
		return nil, errors.New("hlo: the configuration must name a PJRT plugin (bdxla:/path/to/plugin.so)")
	}
	opts, err := parseOptions(optionList)
	if err != nil {
		return nil, err
	}
	plugin, err := pjrt.GetPlugin(path)
	if err != nil {
		return nil, fmt.Errorf("hlo: loading the PJRT plugin %q: %w", path, err)
	}
	client, err := plugin.NewClient(opts.client)
	if err != nil {
		return nil, fmt.Errorf("hlo: creating a client of %s: %w", plugin, err)
	}
	devices := client.AddressableDevices()
	if len(devices) == 0 {
		_ = client.Destroy()
		return nil, fmt.Errorf("hlo: %s has no addressable device", plugin)
	}
	b := &Backend{plugin: plugin, client: client, device: devices[0]}
	opts.apply(b)
	b.tritonPDL = b.tritonPDL && b.launchesPDL()
	return b, nil
}

// NewBuildOnly returns a backend that builds programs but runs none: it needs no
// plugin, keeps buffers in host memory, and its executables hold only their StableHLO
// text (see [Program]) and fail with [ErrBuildOnly] when executed. It lets machines
// without an accelerator check that programs build.
func NewBuildOnly() *Backend { return &Backend{} }

// NewBuildOnlyWith is [NewBuildOnly] with the options of a configuration (what follows
// the plugin's path in [New]'s, e.g. "triton=gemv"), so that the programs they change
// can be read without a plugin. The client's options are checked but unused.
func NewBuildOnlyWith(options string) (*Backend, error) {
	opts, err := parseOptions(options)
	if err != nil {
		return nil, err
	}
	b := NewBuildOnly()
	opts.apply(b)
	return b, nil
}

// options are the options of a configuration.
type options struct {
	client pjrt.NamedValuesMap // the client's (preallocate), nil if none
	programOptions
}

// apply sets the options that change how b builds programs.
func (o options) apply(b *Backend) { b.programOptions = o.programOptions }

// tritonOptions lists the values of option triton, for parseOptions' errors.
const tritonOptions = "triton=gemv, triton=gemv-all, triton=attention, triton=fold, triton=pdl, triton=rope, triton=norm, triton=place, triton=preload"

// parseOptions reads the options of a configuration, comma-separated.
func parseOptions(list string) (options, error) {
	var o options
	if list == "" {
		return o, nil
	}
	for option := range strings.SplitSeq(list, ",") {
		key, value, _ := strings.Cut(option, "=")
		switch key {
		case "preallocate":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return options{}, fmt.Errorf("hlo: option %q: %w", option, err)
			}
			if o.client == nil {
				o.client = pjrt.NamedValuesMap{}
			}
			o.client[key] = b
		case "notf32":
			o.noTF32 = true
		case "splitdown":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return options{}, fmt.Errorf("hlo: option %q: want splitdown=N, N a whole number of parts of at least 1", option)
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
				return options{}, fmt.Errorf("hlo: option %q: unknown Triton kernels %q (known: %s)", option, value, tritonOptions)
			}
		default:
			return options{}, fmt.Errorf("hlo: unknown option %q (known: preallocate=<bool>, notf32, splitdown=N, %s)", option, tritonOptions)
		}
	}
	return o, nil
}

// launchesPDL reports whether b's device can run kernels under programmatic dependent
// launch: a CUDA device of compute capability 9.0 or later.
func (b *Backend) launchesPDL() bool {
	return b.plugin.IsCUDA() && cudaComputeCapability(b.device.LocalHardwareID()) >= 9
}

// kernels appends our Triton kernels as b's options say.
func (b *Backend) kernels() triton.Kernels {
	return triton.Kernels{PDL: b.tritonPDL, Preload: b.tritonPreload}
}

// buildOnly reports whether b was made by NewBuildOnly.
func (b *Backend) buildOnly() bool { return b.client == nil }

// Name returns "bdxla".
func (b *Backend) Name() string { return BackendName }

// FastSingleRowProducts reports whether products of a single row run faster on b than
// the same products padded to 4 rows, which backend.MinWindow asks: yes with option
// triton=gemv, whose 1-row GEMVs are; no otherwise, as on XLA's backend.
func (b *Backend) FastSingleRowProducts() bool { return b.tritonGEMV != gemvNone }

// FusedAttentionOverCache reports whether decoding windows over the cache should ask b
// for the fused attention (see backend.FusedAttentionOverCache): with option
// triton=attention, whose kernels are made for them (and which decline the shapes they
// do not take); not with cuDNN's, which was slower there than the plain path.
func (b *Backend) FusedAttentionOverCache() bool { return b.tritonAttention }

// PlacesWindows reports whether a window at batch 1 that writes nothing should attend
// over a copy of the cache holding its keys and values in their slots rather than over
// the cache and its keys concatenated (see backend.PlacesWindows): with options
// triton=attention, triton=rope and triton=place, whose attention kernel reads them from
// the qkv product's rows, so that the copy is never made. Windows the kernel does not
// take (more than 64 query rows per key/value head: 8 positions of MiniCPM5-2B's
// groups of 8) are attended by XLA's ops over the copy, which costs a copy of the
// layer's cache.
func (b *Backend) PlacesWindows() bool { return b.tritonAttention && b.tritonRope && b.tritonPlace }

// String returns "bdxla".
func (b *Backend) String() string { return BackendName }

// Description names the plugin and its platform.
func (b *Backend) Description() string {
	if b.buildOnly() {
		return "bdxla (build-only: StableHLO programs, no PJRT plugin)"
	}
	return fmt.Sprintf("bdxla (StableHLO on PJRT %s, platform %s)", b.plugin, b.client.Platform())
}

// NumDevices returns 1: only the plugin's first device is used.
func (b *Backend) NumDevices() int { return 1 }

// DeviceDescription describes the device used.
func (b *Backend) DeviceDescription(deviceNum compute.DeviceNum) string {
	if deviceNum != 0 {
		return fmt.Sprintf("hlo: no device %d (only device 0 is used)", deviceNum)
	}
	if b.buildOnly() {
		return "host memory (build-only)"
	}
	return fmt.Sprintf("%s device %d", b.client.Platform(), b.device.LocalHardwareID())
}

// Builder starts a new program.
func (b *Backend) Builder(name string) compute.Builder { return newBuilder(b, name) }

// Finalize destroys the client; buffers and executables of b become invalid.
func (b *Backend) Finalize() {
	if b.finalized {
		return
	}
	b.finalized = true
	if b.client != nil {
		_ = b.client.Destroy()
	}
}

// IsFinalized reports whether Finalize was called.
func (b *Backend) IsFinalized() bool { return b.finalized }

// checkDevice rejects devices other than 0.
func checkDevice(deviceNum compute.DeviceNum) error {
	if deviceNum != 0 {
		return fmt.Errorf("hlo: device %d requested; only device 0 is supported", deviceNum)
	}
	return nil
}

// BufferFromFlatData copies flat, a slice of shape's Go type, to the device.
func (b *Backend) BufferFromFlatData(deviceNum compute.DeviceNum, flat any, shape shapes.Shape) (compute.Buffer, error) {
	if err := checkDevice(deviceNum); err != nil {
		return nil, err
	}
	if b.finalized {
		return nil, errors.New("hlo: BufferFromFlatData on a finalized backend")
	}
	if err := checkFlat(flat, shape); err != nil {
		return nil, fmt.Errorf("hlo: BufferFromFlatData: %w", err)
	}
	if b.buildOnly() {
		return newHostBuffer(b, flat, shape), nil
	}
	pb, err := b.client.BufferFromHost().ToDevice(b.device).
		FromRawData(dtypes.UnsafeByteSliceFromAny(flat), shape.DType, shape.Dimensions).Done()
	if err != nil {
		return nil, fmt.Errorf("hlo: copying a %s buffer to the device: %w", shape, err)
	}
	return &Buffer{backend: b, shape: shape, device: pb}, nil
}

// HasSharedBuffers returns false: device memory is not addressable from Go.
func (b *Backend) HasSharedBuffers() bool { return false }

// NewSharedBuffer fails: see HasSharedBuffers.
func (b *Backend) NewSharedBuffer(compute.DeviceNum, shapes.Shape) (compute.Buffer, any, error) {
	return nil, nil, fmt.Errorf("hlo: shared buffers: %w", compute.ErrNotImplemented)
}
