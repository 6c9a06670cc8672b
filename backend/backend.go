package backend

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/gobackend" // Registers the "go" backend.
)

// Environment variables read by [Select].
const (
	// PluginEnv names a PJRT plugin file to run with XLA.
	PluginEnv = "BLOCKDIFF_PJRT_PLUGIN"
	// GoMLXEnv is GoMLX's own backend configuration variable.
	GoMLXEnv = compute.ConfigEnvVar
)

// GoConfig is the configuration of the pure-Go fallback. One executor avoids a deadlock
// of the default configuration inside While loops on small machines.
const GoConfig = "go:num_executors=1"

// cudaPluginRelPath is where the jax-cuda13-pjrt package puts its plugin below a
// site-packages folder.
var cudaPluginRelPath = filepath.Join("jax_plugins", "xla_cuda13", "xla_cuda_plugin.so")

// cudaBackend is the backend an auto-detected or BLOCKDIFF_PJRT_PLUGIN plugin runs on:
// our own StableHLO backend (package backend/hlo), which took the time of go-xla's on
// every step, prefill and decoding figure of the H200 or less, ran autoregressive
// decoding at batch 1 7 % faster with its Triton GEMVs, and passes the decoder's and
// FP8's fixture tests (BENCHMARKS.md, runs T, Y, Z and AA-AE).
const cudaBackend = ourBackend + ":"

// ourBackend is the name our StableHLO backend registers under: hlo.BackendName, which
// this file cannot import (package backend/hlo needs cgo).
const ourBackend = "bdxla"

// InPlaceMarker, in a program parameter's name followed by an output's index (e.g.
// "input_3~output=5"), asks our backend to write that output into the parameter's buffer
// when the parameter is donated (hlo.InPlaceMarker, which this package cannot import;
// model.InPlace names parameters so). Other backends ignore it.
const InPlaceMarker = "~output="

// cudaOptions are appended to an auto-detected or BLOCKDIFF_PJRT_PLUGIN plugin path:
// preallocating device memory made large outputs 2-3x faster to allocate on the H200;
// triton=gemv runs the 1-row products our Triton GEMV measured faster; triton=attention
// runs the attention of windows over the cache as our Triton kernels where they
// measured faster (batch 1: the AR step 8-9 % faster, the fused step 4-8 %; batches of
// 32 and more; BENCHMARKS.md runs BV-CD); triton=fold folds the norms, SwiGLU and the
// residual adds of one-row products into those GEMVs (the AR step at batch 1 5 %
// faster, runs CJ-CL); triton=pdl launches our kernels under programmatic dependent
// launch where the device has it (Hopper: the AR step 3-4 % faster, runs CT and CU);
// triton=rope has our attention kernel rotate one-token windows' queries itself (the
// AR step 1.8 % faster, run CY); triton=norm runs the RMSNorms of several rows, with
// the residual add before them, as our kernel (the 4- and 8-token steps 1-2 % faster,
// prefill 1-3 %, run DA); triton=place has our attention kernel place one-token
// windows' keys and values and write them into the cache itself (the AR step 3 %
// faster, run DE), and a denoise step's window's, which writes nothing (the 4-token
// step 6-7 % faster, run DL); triton=preload has the AR step's o GEMV load its weight
// while the attention before it runs (1.6-2.1 % faster, runs GY-GZ; 0.7 % on a 4-row
// tile, runs GO, GS, GV and GW);
// splitdown=2 splits the AR step's down GEMV over twice the programs, its two partial
// sums added in a fixed order by the GEMVs that read them (1 % faster, runs GT-GW;
// both together 1.6-1.8 %, run GW).
const cudaOptions = ",preallocate=true,triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2"

// Choice is the backend configuration picked by [Select] and the reason for it.
type Choice struct {
	// Config is a GoMLX backend configuration string, "<name>:<options>".
	Config string
	// Reason says, in words, why this configuration was picked.
	Reason string
}

// IsXLA reports whether the choice runs on XLA (go-xla's backend or ours).
func (c Choice) IsXLA() bool {
	name, _, _ := strings.Cut(c.Config, ":")
	return runsOnXLA(name)
}

// runsOnXLA reports whether the backend registered as name runs on XLA: go-xla's, under
// its names and aliases, or ours ("bdxla").
func runsOnXLA(name string) bool {
	switch name {
	case "xla", "stablehlo", "shlo", "hlo", "pjrt", ourBackend:
		return true
	}
	return false
}

// String returns the configuration and the reason.
func (c Choice) String() string { return fmt.Sprintf("%s (%s)", c.Config, c.Reason) }

// Select decides which backend to use without creating it.
func Select() Choice {
	if plugin := os.Getenv(PluginEnv); plugin != "" {
		return Choice{Config: cudaBackend + plugin + cudaOptions, Reason: PluginEnv + " is set"}
	}
	if config := os.Getenv(GoMLXEnv); config != "" {
		return Choice{Config: config, Reason: GoMLXEnv + " is set"}
	}
	if devicePresent() {
		for _, dir := range sitePackages() {
			plugin := filepath.Join(dir, cudaPluginRelPath)
			if fileExists(plugin) {
				return Choice{Config: cudaBackend + plugin + cudaOptions,
					Reason: "found the CUDA PJRT plugin of jax-cuda13-pjrt in " + dir}
			}
		}
		return Choice{Config: GoConfig, Reason: "an NVIDIA device is present but no CUDA PJRT plugin was found " +
			"(pip install jax[cuda13], or set " + PluginEnv + "); using the pure-Go backend"}
	}
	return Choice{Config: GoConfig, Reason: "no NVIDIA device found; using the pure-Go backend"}
}

// New selects a backend (see [Select]) and creates it.
func New() (compute.Backend, Choice, error) {
	choice := Select()
	b, err := NewWithConfig(choice.Config)
	if err != nil {
		return nil, choice, fmt.Errorf("backend: creating %s: %w", choice, err)
	}
	return b, choice, nil
}

// NewWithConfig creates the backend named by a GoMLX configuration string, without
// downloading anything.
func NewWithConfig(config string) (b compute.Backend, err error) {
	name, _, _ := strings.Cut(config, ":")
	if runsOnXLA(name) && !xlaAvailable {
		return nil, fmt.Errorf("backend %q needs XLA, which this binary was built without (it needs cgo)", config)
	}
	if !slices.Contains(compute.List(), name) {
		return nil, fmt.Errorf("backend: unknown backend %q in %q (available: %s)", name, config, strings.Join(compute.List(), ", "))
	}
	// Backend constructors may panic on bad options; report those as errors.
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("backend: creating %q: %v", config, r)
		}
	}()
	if runsOnXLA(name) {
		// The CUDA plugin's library-layout check warns about a layout that works for
		// the pip-installed plugin; keep the output clean unless the user asked for it.
		if os.Getenv("GOPJRT_CUDA_CHECKS") == "" {
			_ = os.Setenv("GOPJRT_CUDA_CHECKS", "0")
		}
	}
	return compute.NewWithConfig(config)
}

// devicePresent reports whether the machine exposes an NVIDIA device node (a variable so
// tests can pretend).
var devicePresent = func() bool {
	matches, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(matches) > 0
}

// sitePackages lists candidate Python site-packages folders: those of active virtual
// environments, what python3 itself reports, and the usual system and user locations.
func sitePackages() []string {
	var dirs []string
	add := func(patterns ...string) {
		for _, p := range patterns {
			matches, _ := filepath.Glob(p)
			dirs = append(dirs, matches...)
		}
	}
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if prefix := os.Getenv(env); prefix != "" {
			add(filepath.Join(prefix, "lib", "python3*", "site-packages"))
		}
	}
	if python, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(python, "-c",
			"import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))").Output()
		if err == nil {
			dirs = append(dirs, strings.Fields(string(out))...)
		}
	}
	home, _ := os.UserHomeDir()
	add("/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
		"/usr/lib/python3*/site-packages", "/usr/lib/python3/dist-packages",
		filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	return dirs
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}

// RunsLoopsOnDevice reports whether decoding loops should run inside one While on b.
// The Go backend compiles closures before its optimisation passes rewrite them (its
// implicit-broadcast fusion then leaves nodes of While bodies unscheduled), so there
// each iteration runs as its own execution, driven from the host; on the Go backend
// the host is the device anyway.
func RunsLoopsOnDevice(b compute.Backend) bool {
	return b.String() != gobackend.BackendName
}

// MinWindow is the fewest positions a decoding forward of batch rows should run on b.
// On the H200, XLA's dots made one-token windows faster padded to 4 positions at batch
// 1 and 8 and slower at batch 64 (BENCHMARKS.md: an AR step padded took 2.65 ms and
// unpadded 3.34 ms, run D; AR decoding at batch 8 ran at 2227 tokens/s padded and 1415
// unpadded, at batch 64 at 9632 padded and 11169 unpadded, run Z), so on XLA's GPU
// backends one-token windows pad to 4 positions below 64 rows (between 8 and 64 not
// measured). A batch of 1 on a backend with a method FastSingleRowProducts() bool that
// returns true is not padded (our StableHLO backend with option triton, whose 1-row
// GEMVs made the 1-row AR step faster), nor any batch where the backend places windows
// (PlacesWindows): there a one-token window takes its own slot, its key and value read
// where they were computed, where 4 positions go into their slots by scatters (runs FX
// and FY, AR decoding of 256 tokens unpadded against padded: 535 against 666 ms at
// batch 2, 554 against 696 at 4, 585 against 761 at 8, 719 against 1054 at 32). The Go
// backend computes every row it is given, so it pads nothing.
func MinWindow(b compute.Backend, batch int) int {
	if !RunsLoopsOnDevice(b) || batch >= minUnpaddedBatch || PlacesWindows(b) {
		return 1
	}
	if fast, ok := b.(interface{ FastSingleRowProducts() bool }); ok && batch == 1 && fast.FastSingleRowProducts() {
		return 1
	}
	return 4
}

// minUnpaddedBatch is the fewest batch rows whose one-token windows MinWindow leaves
// unpadded on XLA's GPU backends.
const minUnpaddedBatch = 64

// AsksForFusedAttention reports whether half-precision attention without a cache
// should ask b for its fused scaled-dot-product attention by default (see
// model.PrefillAttentionAuto): yes on XLA's backend and on our own StableHLO backend
// ("bdxla", package backend/hlo), whose CUDA plugin runs cuDNN flash attention; no on
// the Go backend, whose fused op is a scalar loop 7-10x slower than the plain path.
func AsksForFusedAttention(b compute.Backend) bool {
	return b.String() != gobackend.BackendName
}

// FusesElementwise reports whether b fuses chains of elementwise operations into
// kernels, so that selecting a few rows into a copy of a tensor costs one pass over
// it: yes on XLA's backend and ours ("bdxla"); no on the Go backend, which
// materialises every operation's result (BENCHMARKS.md, CPU: one-token steps placing
// their key into a copy of the cache took 74 ms there against 26 ms concatenating).
func FusesElementwise(b compute.Backend) bool {
	return b.String() != gobackend.BackendName
}

// AttentionLogSumExp reports whether b's fused scaled-dot-product attention returns, as
// its one state, each query's log-sum-exp of its scaled scores [b, heads, t] in float32,
// so that a caller can merge it with attention over more keys (model's block-causal
// prefill by parts): yes on our own backend ("bdxla"), whose state is cuDNN's softmax
// statistics.
func AttentionLogSumExp(b compute.Backend) bool {
	return b.String() == ourBackend
}

// FusedAttentionOverCache reports whether a window that attends over the cache holding
// its keys in their slots should ask b's fused attention for it: yes where b has a
// method FusedAttentionOverCache() bool that says so (our StableHLO backend with option
// triton=attention, whose Triton kernels are made for short windows over many keys); no
// elsewhere: go-xla's cuDNN lowering takes no more keys than queries, cuDNN's attention
// over the cache on ours was slower than the plain path (BENCHMARKS.md, run Y), and the
// Go backend's fused op is slower than its plain path.
func FusedAttentionOverCache(b compute.Backend) bool {
	f, ok := b.(interface{ FusedAttentionOverCache() bool })
	return ok && f.FusedAttentionOverCache()
}

// PlacesWindows reports whether a window at batch 1 that writes nothing (the denoise
// step's) should attend over a copy of the cache holding its keys and values in their
// slots, placed by a dynamic update, rather than over the cache and its keys
// concatenated: yes where b has a method PlacesWindows() bool that says so (our
// StableHLO backend with options triton=attention, triton=rope and triton=place, whose
// attention kernel takes the keys and values from where they were computed, so that the
// copy is never made); no elsewhere, where the copy would be made (2-3 % slower on the
// H200, BENCHMARKS.md, run BI).
func PlacesWindows(b compute.Backend) bool {
	p, ok := b.(interface{ PlacesWindows() bool })
	return ok && p.PlacesWindows()
}
