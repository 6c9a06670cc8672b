package quant_test

import (
	"context"
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

// Static FP8 activations: calibrate the unquantized model's inputs to every linear
// layer, quantize its weights to FP8 with those input scales (W8A8), then decode as
// with any model. examples/calibrate writes such a calibration to calibration.json
// (Calibration.WriteFile) and quant.Load reads a checkpoint with it. The model is a
// tiny one with random weights; model.Load opens a checkpoint.
func Example() {
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	const bos, eos, mask = 256, 257, 258 // after the 256 byte tokens
	m, err := model.NewRandom(b, model.Config{
		Architecture: model.ArchLlama, VocabSize: 259, HiddenSize: 128, IntermediateSize: 256,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 32, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e4, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 128,
		BOSTokenID: bos, EOSTokenIDs: []int{eos}, MaskTokenID: mask,
	}, model.DefaultDType(b), 1)
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
	res, err := dec.Generate(context.Background(), []int{bos, 'H', 'i'})
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
