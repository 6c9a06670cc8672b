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
// our own StableHLO backend (package backend/hlo), as fast as go-xla's or faster on every
// step, prefill and decoding figure measured, and passing the fixture tests.
const cudaBackend = ourBackend + ":"

// ourBackend is the name our StableHLO backend registers under: hlo.BackendName, which
// this file cannot import (package backend/hlo needs cgo).
const ourBackend = "bdxla"

// InPlaceMarker, in a program parameter's name followed by an output's index (e.g.
// "input_3~output=5"), asks our backend to write that output into the parameter's buffer
// when the parameter is donated (hlo.InPlaceMarker, which this package cannot import;
// modelcore.InPlace names parameters so). Other backends ignore it.
const InPlaceMarker = "~output="

// cudaOptions are appended to an auto-detected or BLOCKDIFF_PJRT_PLUGIN plugin path:
// device memory preallocated. Our backend runs its kernels by default (hlo.New).
const cudaOptions = ",preallocate=true"

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

// MinWindow is the fewest positions a decoding forward of batch rows should run on b:
// 4 below 64 rows on XLA's GPU backends, whose dots run one-token windows faster padded;
// else 1: at batch 1 where b's FastSingleRowProducts() bool is true (1-row GEMVs), where
// b places windows ([PlacesWindows]), and on the Go backend, which computes every row.
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
// should ask b for its fused scaled-dot-product attention (model's prefill attention):
// yes on XLA's backend and on our own StableHLO backend ("bdxla", package backend/hlo),
// whose CUDA plugin runs cuDNN flash attention; no on the Go backend, whose fused op is
// a scalar loop 7-10x slower than the plain path.
func AsksForFusedAttention(b compute.Backend) bool {
	return b.String() != gobackend.BackendName
}

// FusesElementwise reports whether b fuses chains of elementwise operations into
// kernels, so that selecting a few rows into a copy of a tensor costs one pass over
// it: yes on XLA's backend and ours ("bdxla"); no on the Go backend, which
// materialises every operation's result (placing a key into a copy of the cache made
// its one-token steps ~3x slower than concatenating).
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
// method FusedAttentionOverCache() bool that says so (our StableHLO backend with its
// kernels, whose attention is made for short windows over many keys); no
// elsewhere: go-xla's cuDNN lowering takes no more keys than queries, cuDNN's attention
// over the cache on ours was slower than the plain path, and so is the Go backend's.
func FusedAttentionOverCache(b compute.Backend) bool {
	f, ok := b.(interface{ FusedAttentionOverCache() bool })
	return ok && f.FusedAttentionOverCache()
}

// PlacesWindows reports whether a window at batch 1 that writes nothing (the denoise
// step's) should attend over a copy of the cache holding its keys and values in their
// slots, placed by a dynamic update, rather than over the cache and its keys
// concatenated: yes where b has a method PlacesWindows() bool that says so (our
// StableHLO backend with its kernels, whose attention kernel takes the keys and values
// from where they were computed, so that the copy is never made); no elsewhere, where
// making the copy would be slower.
func PlacesWindows(b compute.Backend) bool {
	p, ok := b.(interface{ PlacesWindows() bool })
	return ok && p.PlacesWindows()
}
