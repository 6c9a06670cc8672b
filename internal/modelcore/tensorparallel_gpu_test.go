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
// random weights) against a cache holding 512 positions or more: "ar", the
// autoregressive step (one token committed, blocks of one), and "denoise", the denoise
// step (4 tokens, nothing written). "plain" is the model on one device as it decodes
// today; "tp=N" is tensor-parallel over N devices (1: a mesh of one). Each reports the
// median time of its steps with the host's read of the logits ("median-ms"), and the
// mean time of a run of steps whose logits are not read, the device's work alone
// ("ms/step"). It needs an XLA plugin (see TestTensorParallelMatchesOneDevice) and
// about 10 GB of memory on the first device.
func BenchmarkTensorParallel(b *testing.B) {
	be := testutil.PartitioningBackend(b, "")
	m, err := NewRandom(be, MiniCPM5_2B, dtypes.BFloat16, 1)
	require.NoError(b, err)
	defer m.Close()
	benchTensorParallel(b, m, tpDeviceCounts(be), m.TensorParallel)
}

// benchTensorParallel is BenchmarkTensorParallel on m, tensor-parallel over each of
// counts through parallel.
func benchTensorParallel(b *testing.B, m *Model, counts []int, parallel func(int) (*TensorParallel, error)) {
	prompt := make([]int, 512)
	for i := range prompt {
		prompt[i] = (31*i + 7) % m.Config.VocabSize
	}
	const capacity, burst = 2048, 200
	run := func(b *testing.B, open func(capacity, block int) (*Session, error), kind string) {
		block, tokens := 1, []int{11}
		if kind == "denoise" {
			block, tokens = 4, []int{11, m.Config.MaskTokenID, m.Config.MaskTokenID, m.Config.MaskTokenID}
		}
		var s *Session
		defer func() { s.Close() }()
		// reopen starts a session past the prompt unless s has room for n more steps.
		reopen := func(n int) {
			if s != nil && s.Len()+n*len(tokens) <= capacity {
				return
			}
			if s != nil {
				s.Close()
			}
			var err error
			s, err = open(capacity, block)
			require.NoError(b, err)
			_, err = s.Prefill(prompt)
			require.NoError(b, err)
		}
		step := func() error {
			if kind == "denoise" {
				_, err := s.Step(tokens)
				return err
			}
			_, err := s.Commit(tokens)
			return err
		}
		reopen(1)
		require.NoError(b, step(), "the first step, which compiles its program")
		var times []time.Duration
		for b.Loop() {
			b.StopTimer()
			reopen(1)
			b.StartTimer()
			start := time.Now()
			err := step()
			times = append(times, time.Since(start))
			require.NoError(b, err)
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")

		reopen(burst + 1)
		s.unread = true
		start := time.Now()
		for range burst {
			require.NoError(b, step())
		}
		s.unread = false
		require.NoError(b, step(), "the last step, read: the device is done")
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/(burst+1), "ms/step")
	}
	for _, kind := range []string{"ar", "denoise"} {
		b.Run(kind+"/plain", func(b *testing.B) { run(b, m.NewSession, kind) })
	}
	for _, n := range counts {
		tp, err := parallel(n)
		require.NoError(b, err)
		for _, kind := range []string{"ar", "denoise"} {
			b.Run(fmt.Sprintf("%s/tp=%d", kind, n), func(b *testing.B) { run(b, tp.NewSession, kind) })
		}
		require.NoError(b, tp.Close())
	}
}
