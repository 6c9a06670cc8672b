package diffusion

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

// compareDecoders decodes a batch of prompts with a decoder on one device and with one
// tensor-parallel over devices through parallel, and requires the same results.
func compareDecoders(t *testing.T, m *model.Model, devices int, parallel func(int) (*modelcore.TensorParallel, error)) {
	t.Helper()
	ps := prompts(m, 3)
	for name, cfg := range modeConfigs() {
		t.Run(name, func(t *testing.T) {
			one, err := New(m, cfg)
			require.NoError(t, err)
			want, err := one.GenerateBatch(context.Background(), ps)
			require.NoError(t, err)
			tp, err := New(m, cfg)
			require.NoError(t, err)
			tp.cfg.Devices, tp.parallel = max(devices, 2), parallel // 2: the decoder asks for parallel's layout
			got, err := tp.GenerateBatch(context.Background(), ps)
			require.NoError(t, err)
			for i := range want {
				require.Equal(t, want[i].Tokens, got[i].Tokens, "prompt %d", i)
				require.Equal(t, want[i].Finish, got[i].Finish, "prompt %d", i)
				require.Equal(t, want[i].Stats.Forwards, got[i].Stats.Forwards, "prompt %d", i)
			}
		})
	}
}

// The decoder over the weights laid out for 2 and 4 devices, its programs run whole on
// one (as XLA's partitioner sees them), decodes the tokens of the decoder on one
// device, in every mode.
func TestTensorParallelLayoutDecodes(t *testing.T) {
	b := testutil.Backend(t)
	for _, ref := range fixtureModels(t) {
		m := ref.load(t, b)
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d", filepath.Base(ref.modelPath), n), func(t *testing.T) {
				compareDecoders(t, m, n, func(devices int) (*modelcore.TensorParallel, error) {
					require.Equal(t, n, devices)
					return modelcore.Of(m).TensorParallelLayout(devices)
				})
			})
		}
	}
}

// One device, asked for or not, is the plain decoder: no layout is asked for, and the
// results are those of the default.
func TestOneDeviceIsThePlainDecoder(t *testing.T) {
	m := tinyModel(t)
	ps := prompts(m, 3)
	cfg := Quality
	cfg.MaxNewTokens = 9
	d, err := New(m, cfg)
	require.NoError(t, err)
	want, err := d.GenerateBatch(context.Background(), ps)
	require.NoError(t, err)
	cfg.Devices = 1
	one, err := New(m, cfg)
	require.NoError(t, err)
	one.parallel = func(int) (*modelcore.TensorParallel, error) {
		t.Error("one device asked for a tensor-parallel layout")
		return nil, fmt.Errorf("unexpected")
	}
	got, err := one.GenerateBatch(context.Background(), ps)
	require.NoError(t, err)
	for _, r := range append(want, got...) {
		r.Stats.PrefillTime, r.Stats.DecodeTime = 0, 0
	}
	require.Equal(t, want, got)
}

// Devices is checked, and a backend that cannot spread over them is refused when the
// decoder is made.
func TestDevicesRefused(t *testing.T) {
	cfg := Quality
	cfg.Devices = -1
	require.ErrorContains(t, cfg.Validate(), "devices must be at least 0 and at most 1024, got -1")
	m := tinyModel(t)
	b := modelcore.Of(m).Backend()
	cfg.Devices = 2 * b.NumDevices()
	_, err := New(m, cfg)
	require.ErrorContains(t, err, fmt.Sprintf("diffusion: model: tensor parallelism over %d devices: the backend %s addresses %d devices",
		cfg.Devices, b.Name(), b.NumDevices()))
	cfg.Devices = 3
	_, err = New(m, cfg)
	require.ErrorContains(t, err, "diffusion: model: tensor parallelism over 3 devices: sharding: 4 query heads: does not divide over the devices (3)")
}

// The decoder tensor-parallel over the plugin's devices (a mesh of one, then 2, 4 and
// 8 as the devices and the plan allow) decodes the tokens of the decoder on one device,
// on the fixture models, on go-xla's backend at float32 precision. It needs an XLA
// plugin (BLOCKDIFF_PJRT_PLUGIN, or one package backend finds); run it alone (-run
// TestTensorParallelDecoderMatchesOneDevice): it makes its own client.
func TestTensorParallelDecoderMatchesOneDevice(t *testing.T) {
	b := testutil.PartitioningBackend(t, ",tf32=false")
	for _, ref := range fixtureModels(t) {
		m := ref.load(t, b)
		for n := 1; n <= min(b.NumDevices(), 8); n *= 2 {
			t.Run(fmt.Sprintf("%s/%d", filepath.Base(ref.modelPath), n), func(t *testing.T) {
				if _, err := modelcore.Of(m).TensorParallel(n); err != nil && strings.Contains(err.Error(), "does not divide") {
					t.Skipf("the plan refuses it: %v", err)
				}
				compareDecoders(t, m, n, func(devices int) (*modelcore.TensorParallel, error) {
					return modelcore.Of(m).TensorParallel(n) // n = 1: a mesh of one
				})
			})
		}
	}
}
