package quant

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/modelcore"
)

// BenchmarkLinearApply times one linear layer [n, n] on activations [1, tokens, n] in
// float32: dense weights (the FP8 values, decoded) against FP8 weights (per-channel and per-tensor scales, with
// and without a static input scale). The output is summed to a scalar read back, so
// each call finishes. Sizes are small, for the Go backend.
func BenchmarkLinearApply(b *testing.B) {
	const n = 512
	for _, tokens := range []int{4, 64} {
		dense, sample := randomLinear(b, n, n, StrategyChannel, 0)
		weight, scales, _, err := dense.Host()
		require.NoError(b, err)
		w := make([]float32, len(weight))
		for i, v := range weight {
			w[i] = DecodeE4M3(v) * scales[i/n]
		}
		x := make([]float32, tokens*n)
		for i := range x {
			x[i] = sample[i%len(sample)]
		}
		xt := tensors.FromFlatDataAndDimensions(x, 1, tokens, n)
		variants := []struct {
			name string
			lin  modelcore.Linear
		}{{"dense", &modelcore.Dense{Weight: tensors.FromFlatDataAndDimensions(w, n, n)}}}
		for _, strategy := range []Strategy{StrategyChannel, StrategyTensor} {
			for _, input := range []float32{0, 0.01} {
				for _, decoder := range []Decoder{DecoderLUT, DecoderBits} {
					l, _ := randomLinear(b, n, n, strategy, input)
					l.Decoder = decoder
					mode := "weight-only"
					if input != 0 {
						mode = "w8a8"
					}
					variants = append(variants, struct {
						name string
						lin  modelcore.Linear
					}{fmt.Sprintf("fp8-%s-%s-%s", strategy, mode, []string{"lut", "bits"}[decoder]), l})
				}
			}
		}
		for _, v := range variants {
			b.Run(fmt.Sprintf("tokens=%d/%s", tokens, v.name), func(b *testing.B) {
				exec, err := graph.NewExec(testBackend(b), func(in []*graph.Node) *graph.Node {
					return graph.ReduceAllSum(v.lin.Apply(in[0], in[1:]))
				})
				require.NoError(b, err)
				defer exec.Finalize()
				args := []any{xt}
				for _, p := range v.lin.Params() {
					args = append(args, p)
				}
				run := func() {
					out, err := exec.Call(args...)
					require.NoError(b, err)
					_ = out[0].Value()
					out[0].MustFinalizeAll()
				}
				run() // Compile and move the inputs to the device outside the timing.
				for b.Loop() {
					run()
				}
			})
		}
	}
}
