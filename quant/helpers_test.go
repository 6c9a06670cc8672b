package quant

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/fixtures"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// allLogits returns the logit rows of every case, concatenated.
func allLogits(t *testing.T, m *model.Model, cases []fixtures.LogitCase) [][]float32 {
	t.Helper()
	var rows [][]float32
	for _, c := range cases {
		got, err := m.Logits(c.InputIDs, c.BlockSize)
		require.NoError(t, err)
		rows = append(rows, got...)
	}
	return rows
}

// logSoftmax returns log softmax(row) in float64.
func logSoftmax(row []float32) []float64 {
	peak := math.Inf(-1)
	for _, v := range row {
		peak = math.Max(peak, float64(v))
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v) - peak)
	}
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - peak - math.Log(sum)
	}
	return out
}

// argmax returns the index of the largest value.
func argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// agreement returns the fraction of rows whose argmax agree and the mean
// KL(p ‖ q) over rows, p = softmax(ref), q = softmax(got), in float64.
func agreement(t *testing.T, ref, got [][]float32) (top1, kl float64) {
	t.Helper()
	require.Equal(t, len(ref), len(got))
	same := 0
	for i := range ref {
		if argmax(ref[i]) == argmax(got[i]) {
			same++
		}
		lp, lq := logSoftmax(ref[i]), logSoftmax(got[i])
		for j := range lp {
			kl += math.Exp(lp[j]) * (lp[j] - lq[j])
		}
	}
	return float64(same) / float64(len(ref)), kl / float64(len(ref))
}

// loadDense loads a checkpoint folder with dense layers in float32.
func loadDense(t *testing.T, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(testBackend(t), dir, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// loadFP8 loads a checkpoint folder with quant.Load in float32.
func loadFP8(t *testing.T, dir string, opts Options) *model.Model {
	t.Helper()
	m, err := Load(testBackend(t), dir, opts, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// linearMemory returns the device bytes of the model's FP8 layers and what the same
// layers take in bfloat16 (2 bytes per weight).
func linearMemory(t *testing.T, m *model.Model) (fp8, bf16 int64) {
	t.Helper()
	for _, nl := range modelcore.Of(m).Linears() {
		if l, ok := nl.Linear.(*FP8Linear); ok {
			fp8 += l.Bytes()
			bf16 += 2 * int64(l.OutFeatures()*l.InFeatures())
		}
	}
	require.Positive(t, fp8)
	return fp8, bf16
}
