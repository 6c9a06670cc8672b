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

// programOptions are what changes how a backend builds programs: which of our kernels
// it runs (defaultKernels, or none with option nokernels; tests pick others through
// export_test.go) and the precision of float32 products.
type programOptions struct {
	noTF32     bool       // float32 dot products at full precision (option "notf32")
	tritonGEMV gemvPolicy // which dense bf16 products run our Triton GEMV (gemv.go)
	// tritonAttention runs the fused attentions of short windows over more keys as our
	// Triton kernels (attention.go).
	tritonAttention bool
	// tritonFold folds the RMSNorm before a dense layer of one row, and the SwiGLU and
	// residual add around one, into our Triton GEMVs (fold.go).
	tritonFold bool
	// tritonPDL launches our Triton kernels with programmatic dependent launch, where the
	// device can (see [triton.Kernels]).
	tritonPDL bool
	// tritonRope folds the rotation of the queries into our attention kernel (rope.go).
	tritonRope bool
	// tritonNorm runs the RMSNorm before a dense layer of several rows, with the
	// residual add before it, as our Triton kernel (norm.go).
	tritonNorm bool
	// tritonPlace has our attention kernel place windows' keys and values in their
	// cache slots itself, and one-token windows' write them there (place.go).
	tritonPlace bool
	// tritonPreload has the o projection's GEMV of the AR step at batch 1 load its
	// weight while the attention before it runs (fold.go and triton.Kernels.Preload).
	tritonPreload bool
	// downSplits is how many programs split each tile's K loop in the AR step's down
	// GEMV (fold.go); 0 or 1 for none.
	downSplits int
}

// defaultKernels are the kernels our backend runs, each where it measured faster on
// the H200 than XLA's own ops (PERFORMANCE.md has the figures); each declines the
// shapes it does not take:
//   - our GEMV for dense products where faster: bf16 of one row and a W of 8 Mi entries
//     or more, FP8 bytes up to 32 rows, W8A8 of 2 to 8 rows ([Function.DotGeneral]);
//   - our attention kernels for windows of up to 64 query rows per key/value head over
//     the cache ([Backend.FusedAttentionOverCache]), one-token windows' queries rotated
//     inside them (rope.go), and windows' keys and values taken from the qkv rows and
//     one-token windows' written into the cache by them (place.go,
//     [Backend.PlacesWindows]);
//   - the RMSNorm before, and SwiGLU and the residual add after, one-row products
//     folded into their GEMVs (fold.go), the AR step's down GEMV splitting its K loop in
//     two (its partial sums added in a fixed order by the GEMVs that read them), and
//     its o GEMV loading its weight while the attention before it runs;
//   - the RMSNorm of several rows, with the residual add before it, as one kernel
//     (norm.go);
//   - all of them under programmatic dependent launch, on compute capability 9.0+.
var defaultKernels = programOptions{tritonGEMV: gemvWhereFaster, tritonAttention: true, tritonFold: true, tritonPDL: true,
	tritonRope: true, tritonNorm: true, tritonPlace: true, tritonPreload: true, downSplits: 2}

var _ compute.Backend = (*Backend)(nil)

// New loads the PJRT plugin that config names (a path, or a name pjrt resolves), with
// options after commas. On a CUDA plugin it runs our kernels (defaultKernels) where
// they measured faster than XLA's ops, and XLA's ops everywhere else. The options:
//   - "preallocate=<bool>", the client's;
//   - "notf32": float32 products at full precision, not TF32 (the exact fixture tests);
//   - "nokernels": none of our kernels, XLA's own ops only (and cuDNN's attention for
//     windows without a cache, as on go-xla's backend): the one opt-out.
//
// Unknown options are errors.
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
	if !plugin.IsCUDA() {
		b.programOptions = programOptions{noTF32: b.noTF32} // our kernels are CUDA's
	}
	b.tritonPDL = b.tritonPDL && b.launchesPDL()
	return b, nil
}

// NewBuildOnly returns a backend that builds programs but runs none: it needs no
// plugin, keeps buffers in host memory, and its executables hold only their StableHLO
// text (see [Program]) and fail with [ErrBuildOnly] when executed. It builds them as
// [New]'s backend does by default, with our kernels (those under programmatic dependent
// launch too, as on an H200). It lets machines without an accelerator check that
// programs build, and read them.
func NewBuildOnly() *Backend { return &Backend{programOptions: defaultKernels} }

// NewBuildOnlyWith is [NewBuildOnly] with the options of a configuration (what follows
// the plugin's path in [New]'s, e.g. "nokernels"). The client's options are checked but
// unused.
func NewBuildOnlyWith(options string) (*Backend, error) {
	opts, err := parseOptions(options)
	if err != nil {
		return nil, err
	}
	b := &Backend{}
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

// parseOptions reads the options of a configuration, comma-separated (New lists them).
func parseOptions(list string) (options, error) {
	o := options{programOptions: defaultKernels}
	if list == "" {
		return o, nil
	}
	noTF32 := false
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
			noTF32 = true
		case "nokernels":
			o.programOptions = programOptions{}
		default:
			return options{}, fmt.Errorf("hlo: unknown option %q (known: preallocate=<bool>, notf32, nokernels)", option)
		}
	}
	o.noTF32 = noTF32
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
// the same products padded to 4 rows, which backend.MinWindow asks: yes with our GEMV,
// whose 1-row products are; no with option nokernels, as on XLA's backend.
func (b *Backend) FastSingleRowProducts() bool { return b.tritonGEMV != gemvNone }

// FusedAttentionOverCache reports whether decoding windows over the cache should ask b
// for the fused attention (see backend.FusedAttentionOverCache): with our attention
// kernels, made for them (and which decline the shapes they do not take); not with
// option nokernels, for cuDNN's was slower there than the plain path.
func (b *Backend) FusedAttentionOverCache() bool { return b.tritonAttention }

// PlacesWindows reports whether a window at batch 1 that writes nothing should attend
// over a copy of the cache holding its keys and values in their slots rather than over
// the cache and its keys concatenated (see backend.PlacesWindows): with our attention
// kernel, which reads them from the qkv product's rows (rope.go, place.go), so that the
// copy is never made; not with option nokernels. Windows the kernel does not
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
