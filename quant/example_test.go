package quant_test

import (
	"context"
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/demo"
	"github.com/blockdiff/blockdiff/quant"
)

// Static FP8 activations: calibrate the unquantized model's inputs to every linear
// layer, quantize its weights to FP8 with those input scales (W8A8), then decode as
// with any model. examples/calibrate writes such a calibration to calibration.json
// (Calibration.WriteFile) and quant.Load reads a checkpoint with it.
func Example() {
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	m, err := demo.Model(b) // a tiny random-weight model; use model.Load for a checkpoint
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	// Real text calibrates better (ReadTokenFiles); random tokens show the calls.
	sequences, err := quant.RandomSequences(4, 16, m.Config.VocabSize, 1)
	if err != nil {
		log.Fatal(err)
	}
	calibration, err := quant.Calibrate(m, sequences, quant.CalibrateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("layers calibrated:", len(calibration.LayerNames()) == len(quant.LayerNames(m.Config)))
	if err := quant.QuantizeModel(m, quant.Options{Calibration: calibration}); err != nil {
		log.Fatal(err)
	}

	cfg := diffusion.Quality
	cfg.MaxNewTokens = 8
	dec, err := diffusion.New(m, cfg)
	if err != nil {
		log.Fatal(err)
	}
	res, err := dec.Generate(context.Background(), []int{demo.BOS, 'H', 'i'})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("within the limit:", len(res.Tokens) <= cfg.MaxNewTokens)
	// Output:
	// layers calibrated: true
	// within the limit: true
}

// E4M3 keeps 3 bits of mantissa: values round to the nearest one it holds, and
// saturating clamps those past its largest finite value, 448, to it (without, they
// become NaN, as PyTorch's cast makes them).
func ExampleEncodeE4M3() {
	for _, v := range []float32{0.3, -2.5, 1000} {
		fmt.Println(v, "->", quant.DecodeE4M3(quant.EncodeE4M3(v, true)))
	}
	// Output:
	// 0.3 -> 0.3125
	// -2.5 -> -2.5
	// 1000 -> 448
}
