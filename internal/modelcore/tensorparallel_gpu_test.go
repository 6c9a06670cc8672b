package modelcore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
)

// tpDeviceCounts are the device counts the tensor-parallel runs take: 1 (a mesh of one)
// and the powers of two up to the backend's devices, at most 8.
func tpDeviceCounts(b compute.Backend) []int {
	var out []int
	for n := 1; n <= min(b.NumDevices(), 8); n *= 2 {
		out = append(out, n)
	}
	return out
}

// Tensor-parallel decoding over the plugin's devices (a mesh of one, then 2, 4 and 8 as
// the devices and the plan allow) gives the logits and the greedy tokens of the model
// on one device, on go-xla's backend at float32 precision: the fixture models and a
// random 2-layer model of the MiniCPM5-2B shape. It needs an XLA plugin
// (BLOCKDIFF_PJRT_PLUGIN, or one package backend finds); run it alone (-run
// TestTensorParallelMatchesOneDevice): it makes its own client.
func TestTensorParallelMatchesOneDevice(t *testing.T) {
	b := testutil.PartitioningBackend(t, ",tf32=false")
	models := tpModels(t, b)
	cfg := MiniCPM5_2B
	cfg.NumLayers = 2
	m, err := NewRandom(b, cfg, dtypes.Float32, 5)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	models["minicpm5-2b-shape"] = m
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m := models[name]
		want := traceDecode(t, m.Config, m.NewSession, 6, nil)
		for _, n := range tpDeviceCounts(b) {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				tp, err := m.TensorParallel(n)
				if err != nil && strings.Contains(err.Error(), "does not divide") {
					t.Skipf("the plan refuses it: %v", err)
				}
				require.NoError(t, err)
				defer tp.Close()
				got := traceDecode(t, m.Config, tp.NewSession, 6, want.tokens)
				t.Logf("%d devices: max |Δ| / max |ref| = %.2g", n, compareTraces(t, got, want, logitTolerance))
			})
		}
	}
}

// BenchmarkTensorParallel times the batch-1 steps of the MiniCPM5-2B shape (bfloat16,
// random weights) against a cache holding 512 positions: "ar", the autoregressive
// step (one token committed, blocks of one), and "denoise", the denoise step (4 tokens,
// nothing written). "plain" is the model on one device as it decodes today; "tp=N" is
// tensor-parallel over N devices (1: a mesh of one). Each reports the median time of
// its steps, the host's read of the logits included ("median-ms"). It needs an XLA
// plugin (see TestTensorParallelMatchesOneDevice) and about 5 GB of memory per device.
func BenchmarkTensorParallel(b *testing.B) {
	be := testutil.PartitioningBackend(b, "")
	m, err := NewRandom(be, MiniCPM5_2B, dtypes.BFloat16, 1)
	require.NoError(b, err)
	defer m.Close()
	prompt := make([]int, 512)
	for i := range prompt {
		prompt[i] = (31*i + 7) % m.Config.VocabSize
	}
	const capacity = 2048
	run := func(b *testing.B, open func(capacity, block int) (*Session, error), kind string) {
		block, tokens := 1, []int{11}
		if kind == "denoise" {
			block, tokens = 4, []int{11, m.Config.MaskTokenID, m.Config.MaskTokenID, m.Config.MaskTokenID}
		}
		s, err := open(capacity, block)
		require.NoError(b, err)
		defer func() { s.Close() }()
		_, err = s.Prefill(prompt)
		require.NoError(b, err)
		step := func() error {
			if kind == "denoise" {
				_, err := s.Step(tokens)
				return err
			}
			_, err := s.Commit(tokens)
			return err
		}
		require.NoError(b, step(), "the first step, which compiles its program")
		var times []time.Duration
		for b.Loop() {
			if s.Len()+len(tokens) > capacity {
				b.StopTimer()
				s.Close()
				s, err = open(capacity, block)
				require.NoError(b, err)
				_, err = s.Prefill(prompt)
				require.NoError(b, err)
				b.StartTimer()
			}
			start := time.Now()
			err := step()
			times = append(times, time.Since(start))
			require.NoError(b, err)
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	}
	for _, kind := range []string{"ar", "denoise"} {
		b.Run(kind+"/plain", func(b *testing.B) { run(b, m.NewSession, kind) })
	}
	for _, n := range tpDeviceCounts(be) {
		tp, err := m.TensorParallel(n)
		require.NoError(b, err)
		for _, kind := range []string{"ar", "denoise"} {
			b.Run(fmt.Sprintf("%s/tp=%d", kind, n), func(b *testing.B) { run(b, tp.NewSession, kind) })
		}
		require.NoError(b, tp.Close())
	}
}
