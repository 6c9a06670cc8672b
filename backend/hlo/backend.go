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
// options after commas:
//   - "preallocate=<bool>", the client's;
//   - "notf32", which makes float32 dot products run at full precision (XLA's GPU default
//     rounds their inputs to TF32; the float32 fixture tests need exact products);
//   - "triton=gemv", which lowers the dense bfloat16 products (x [..., K] times
//     W [N, K]ᵀ, as model/linear.go's) that our own Triton GEMV kernel (package
//     backend/hlo/triton) measured faster than stablehlo.dot_general on the H200 to that
//     kernel: one row, and W of at least 8 Mi entries; and those of up to 32 rows whose
//     weight is FP8 E4M3FN bytes decoded by package quant's table, reading the bytes
//     (fp8.go; past 32 rows, XLA's GEMM reads them as f8E4M3FN values), and W8A8
//     layers' of 2 to 8 rows as FP8 × FP8 on the tensor cores; see
//     [Function.DotGeneral];
//   - "triton=gemv-all", which lowers every such product of 1 to 8 rows that the kernel
//     can compute (for tests and measurements);
//   - "triton=attention", which runs the fused attention of bfloat16 windows of up to 64
//     query rows per key/value head over more keys (a decoding window over its cache)
//     as our own Triton kernels (triton.Kernels.AttentionOutput), declining the shapes they do
//     not take rather than use cuDNN's, and makes the model ask for it
//     ([Backend.FusedAttentionOverCache]): on the H200 at batch 1 the AR step 8-9 %
//     faster, the fused step 4-8 %, and decoding windows of 8 2-7 % faster at batches 8
//     to 32 (BENCHMARKS.md, runs BZ-CG). It combines with the GEMV options:
//     "triton=gemv,triton=attention";
//   - "triton=fold", which folds the RMSNorm before a dense layer of one row (model's
//     normed layers at the AR step, batch 1) into our Triton GEMV
//     (triton.GEMVNormTTIR), and the residual add after a one-row dense product into
//     our GEMV of that product (triton.GEMVResidualTTIR), with the SwiGLU before it
//     where the product is the down projection (triton.GEMVSwiGLUResidualTTIR): the
//     norm's reduction, its product by the weight, SwiGLU and the add then need no
//     kernel of their own (fold.go). On the H200 the AR step at batch 1 is 5 % faster
//     with it (BENCHMARKS.md, runs CJ-CL). Backend selection on CUDA uses it;
//   - "triton=pdl", which has our Triton kernels take part in programmatic dependent
//     launch where the device has compute capability 9.0 or later (nothing on
//     others): each waits for the kernels before it at its start and lets the next
//     one launch once its main loop is done (triton.Kernels). On the H200 the AR step
//     at batch 1 is 3-4 % faster with it (BENCHMARKS.md, runs CT and CU). Backend
//     selection on CUDA uses it;
//   - "triton=rope", which, with triton=attention, folds the rotary embedding of
//     one-token windows' queries (model's rotary.apply) into our attention kernel,
//     which then reads the float32 rows of the qkv product where they are and rotates
//     the queries as it loads them (rope.go): one kernel less per layer, where XLA
//     would slice and rotate them. On the H200 the AR step at batch 1 is 1.8 % faster
//     with it (BENCHMARKS.md, run CY). Backend selection on CUDA uses it;
//   - "triton=norm", which runs model's RMSNorm before a dense layer of several rows
//     (the 4- and 8-token steps, prefill), with the residual add before it, as one
//     Triton kernel of ours where XLA runs two or three (norm.go). On the H200 the 4-
//     and 8-token steps are 1-2 % faster with it and prefill 1-3 % (BENCHMARKS.md, run
//     DA). Backend selection on CUDA uses it;
//   - "triton=place", which, with triton=rope, has our attention kernel of a one-token
//     window take the window's key and value from the qkv product's rows (the key
//     rotated as the queries), use them in place of the cache's slot for them, and
//     write them into that slot of the cache itself, its outputs aliasing the cache's
//     buffers, where model placed them with a select of XLA's that copied the cache
//     (place.go): one kernel less per layer. On the H200 the AR step at batch 1 is 3 %
//     faster with it (BENCHMARKS.md, runs DC-DE). Longer windows at batch 1 that write
//     nothing (the 4-token denoise step's) take their keys and values from the rows too,
//     the model placing them by a dynamic update rather than concatenating them with
//     the cache ([Backend.PlacesWindows]): the denoise step 6-7 % faster (run DL).
//     Backend selection on CUDA uses it;
//   - "triton=preload", which, with triton=fold and triton=pdl, has the o projection's
//     GEMV of a one-token window at batch 1 (the AR step) take a tile of 2 rows of the
//     whole K, where its accumulators fit (K up to 2048), and load it before its PDL
//     wait, and the attention kernels before it let it launch right after their own
//     wait, so that its weight streams while they run, as the PyTorch peer's o GEMV's
//     does (triton.Kernels.Preload). On the H200 the AR step at batch 1 is 0.7 %
//     faster with it (BENCHMARKS.md, runs GO, GS, GV and GW), 1.6-2.1 % since the tile
//     has 2 rows (runs GY, GZ). Backend selection on CUDA uses it;
//   - "splitdown=N", which, with triton=fold, splits the K loop of the AR step's down
//     GEMV of bfloat16 weights (triton.GEMVSwiGLUSplitTTIR) over N programs per tile of
//     rows where K's steps divide into N parts: each writes its partial sums to a row
//     of the layer's output parts, which the GEMVs that read that output (the next
//     layer's q/k/v and o GEMVs, the head's) sum in a fixed order as they load them, so
//     results do not vary from run to run as atomic adds would (fold.go). On the H200
//     the AR step at batch 1 is 1 % faster with 2 parts than with none, 1–4 % slower
//     with 3 or 4 (BENCHMARKS.md, runs GT–GW). Backend selection on CUDA uses 2.
//
// Backend selection on CUDA uses
// "triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2".
//
// Unknown options, and values of triton other than these, are errors.
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
// triton, whose 1-row GEMVs made the 1-token AR step faster than the same step padded
// to 4 rows (BENCHMARKS.md, run S: 2.467 against 2.591 ms on the H200); no otherwise,
// as on XLA's backend, whose 1-row GEMMs are slower.
func (b *Backend) FastSingleRowProducts() bool { return b.tritonGEMV != gemvNone }

// FusedAttentionOverCache reports whether decoding windows over the cache should ask b
// for the fused attention (see backend.FusedAttentionOverCache): with option
// triton=attention, whose kernels are made for them (and which decline the shapes they
// do not take); not with cuDNN's, which was slower there than the plain path
// (BENCHMARKS.md, run Y).
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
