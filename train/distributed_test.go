package train

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/sharding"
	"github.com/blockdiff/blockdiff/model"
)

// One device asked for explicitly is the plain program: the same state, bit for bit,
// as the default, through the trainer's per-device plumbing.
func TestOneDeviceIsThePlainStep(t *testing.T) {
	m := microModel(t, microConfig(), 4)
	run := func(devices int) [][]float32 {
		cfg := smallConfig()
		cfg.Devices = devices
		tr, err := New(m, smallData(), cfg)
		require.NoError(t, err)
		defer tr.Close()
		require.Equal(t, 1, tr.prog.devices)
		require.Nil(t, tr.prog.specs, "one device: no sharding")
		_, err = tr.Run(context.Background(), RunOptions{Steps: 3})
		require.NoError(t, err)
		return masterValues(t, tr)
	}
	want, got := run(0), run(1)
	for i := range want {
		require.Equal(t, want[i], got[i], "tensor %d", i)
	}
}

func TestDevicesRefused(t *testing.T) {
	m := microModel(t, microConfig(), 4)
	cfg := smallConfig()
	cfg.Devices = 3
	_, err := New(m, smallData(), cfg)
	require.ErrorContains(t, err, "a batch of 4 rows does not divide over 3 devices")
	have := modelcore.Of(m).Backend().NumDevices()
	cfg.Devices, cfg.Batch = 2*have, 4*have
	_, err = New(m, smallData(), cfg)
	require.ErrorContains(t, err, fmt.Sprintf("%d devices asked for, the backend %s addresses %d", 2*have, modelcore.Of(m).Backend().Name(), have))
}

// The step's inputs are placed by the data-parallel plan: the batch's rows split, the
// rest replicated.
func TestStepInputKinds(t *testing.T) {
	const n = 5
	kinds := map[sharding.InputKind]int{}
	for i := range 3*n + 6 + n {
		kinds[stepInputKind(i, n)]++
	}
	require.Equal(t, map[sharding.InputKind]int{sharding.Weights: 2 * n, sharding.OptimizerState: 2 * n,
		sharding.StepState: 3, sharding.BatchRows: 3}, kinds)
	plan, err := sharding.NewDataParallel(4, 8)
	require.NoError(t, err)
	for i := range 3*n + 6 + n {
		want := sharding.Replicated
		if i >= 3*n+3 && i < 3*n+6 {
			want = 0
		}
		require.Equal(t, want, plan.Axis(stepInputKind(i, n)), "input %d", i)
	}
	rows := &Rows{Rows: 4, Width: 2, Tokens: []int32{0, 1, 2, 3, 4, 5, 6, 7}, Segments: make([]int32, 8), Positions: make([]int32, 8)}
	part := rows.slice(2, 4)
	require.Equal(t, []int32{4, 5, 6, 7}, part.Tokens)
	require.Equal(t, 2, part.Rows)
	require.Len(t, part.Positions, 4)
}

// The Go backend cannot partition a program: GoMLX's graph refuses a mesh larger than
// the backend's one device, and the backend's builder refuses auto-sharding itself.
func TestGoBackendRefusesDistribution(t *testing.T) {
	b := modelcore.Of(microModel(t, microConfig(), 4)).Backend()
	if b.String() != "go" {
		t.Skipf("the backend is %s, not Go's", b.Name())
	}
	in := []shapes.Shape{shapes.Make(dtypes.Float32, 4, 3)}
	_, err := compileSharded(b, "two", in, nil, 2, []int{0}, func(x []*Node) []*Node { return x })
	require.ErrorContains(t, err, "number of devices in the mesh (2) exceeds the number of devices in the backend (1)")

	mesh, err := sharding.Mesh(1, sharding.BatchAxis)
	require.NoError(t, err)
	g := NewGraph(b, "one")
	defer g.Finalize()
	require.NoError(t, g.SetAutoSharding(mesh))
	err = exceptions.TryCatch[error](func() { Parameter(g, "x", in[0]) })
	require.ErrorIs(t, err, compute.ErrNotImplemented)
	t.Logf("the Go backend on a one-device mesh: %v", err)
}

// Data-parallel training over every device of the plugin (up to 8) takes the steps one
// device takes, within float32 tolerance. It needs an XLA plugin of several devices
// (BLOCKDIFF_PJRT_PLUGIN, or one package backend finds) and runs on go-xla's backend
// (backend.ForDevices), at full float32 precision; run it alone (-run
// TestDataParallelMatchesOneDevice): it makes its own client.
func TestDataParallelMatchesOneDevice(t *testing.T) {
	choice := backend.Select()
	if !choice.IsXLA() {
		t.Skipf("needs an XLA plugin of several devices; the backend is %s", choice)
	}
	choice = backend.ForDevices(choice, 2)
	b, err := backend.NewWithConfig(choice.Config + ",tf32=false")
	require.NoError(t, err)
	defer b.Finalize()
	devices := min(b.NumDevices(), 8)
	if devices < 2 {
		t.Skipf("needs several devices; %s addresses %d", choice.Config, devices)
	}
	m, err := model.NewRandom(b, microConfig(), dtypes.Float32, 4)
	require.NoError(t, err)
	defer m.Close()
	const steps = 6
	run := func(devices int) ([][]float32, []Stats) {
		cfg := smallConfig()
		cfg.Batch, cfg.Devices, cfg.DType = 8, devices, dtypes.Float32
		cfg.Schedule.Total = steps
		tr, err := New(m, smallData(), cfg)
		require.NoError(t, err)
		defer tr.Close()
		var stats []Stats
		for range steps {
			require.NoError(t, tr.Step())
			s, err := tr.ReadStats()
			require.NoError(t, err)
			stats = append(stats, s)
		}
		return masterValues(t, tr)[:len(tr.params)], stats
	}
	want, wantStats := run(1)
	for n := 2; n <= devices; n *= 2 {
		got, gotStats := run(n)
		for i := range wantStats {
			require.InEpsilon(t, wantStats[i].Loss, gotStats[i].Loss, 1e-5, "%d devices: loss of step %d", n, i)
			require.InEpsilon(t, wantStats[i].GradNorm, gotStats[i].GradNorm, 1e-4, "%d devices: gradient norm of step %d", n, i)
		}
		var diff, norm, worst float64
		for i := range want {
			for j := range want[i] {
				d := math.Abs(float64(want[i][j] - got[i][j]))
				diff, norm, worst = diff+d, norm+math.Abs(float64(want[i][j])), max(worst, d)
			}
		}
		t.Logf("%d devices: masters differ by %.3g relative (L1), %.3g at most", n, diff/norm, worst)
		require.Less(t, diff/norm, 1e-5, "%d devices: the masters' relative L1 difference", n)
		// One AdamW update is at most the peak rate per element: a gradient of nearly
		// zero whose sign the sum's order flips bounds the worst element.
		require.Less(t, worst, 2*steps*smallConfig().Schedule.Peak, "%d devices", n)
	}
}
