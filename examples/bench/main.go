// Command bench measures blockdiff on the current backend: the latency of a 4-token
// denoise step, an 8-token fused step and an autoregressive step (each inside a
// device-side loop, and as one execution each), prefill, and decoding throughput at
// several batch sizes for both presets under forced reveal schedules.
//
// By default it builds the MiniCPM5-2B shape with random weights, so no checkpoint is
// needed; -config builds the shape of another config.json so (a checkpoint's, without
// its weights; bench/shapes has MiniCPM-2B's), and -model runs a real one. With random
// weights confidences mean nothing, so the decoding figures use forced schedules:
// reveal-all (every mask at once, anchor guesses accepted: an upper bound) and
// reveal-min (the preset's minimum per step: a lower bound).
//
//	go run ./examples/bench -only steps,prefill,decode -batches 1,8,64
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
)

var (
	modelDir     = flag.String("model", "", "checkpoint folder (default: the MiniCPM5-2B shape with random weights)")
	configFile   = flag.String("config", "", "config.json (or a folder holding one) whose shape to build with random weights instead of MiniCPM5-2B's; without a mask_token_id, the last vocabulary row masks")
	layers       = flag.Int("layers", 0, "override the number of layers of the random model (0: as configured)")
	dtypeFlag    = flag.String("dtype", "", "compute dtype: bfloat16 or float32 (default: the backend's)")
	context_     = flag.Int("context", 512, "positions already in the cache for step timings")
	capacity     = flag.Int("capacity", 2048, "cache capacity for step timings")
	iters        = flag.Int("iters", 50, "forwards per device loop, and repetitions of single executions")
	only         = flag.String("only", "steps,prefill,decode", "comma-separated: steps, prefill, decode")
	steps        = flag.String("steps", "denoise,fused,ar", "comma-separated step kinds to time: denoise, fused, ar, ar-padded")
	added        = flag.Int("added-steps", 4, "also time device loops of this many times -iters steps, and report the time each added step takes (0: not), free of each execution's own cost, as a CUDA-graph replay timed by CUDA events is")
	loopExit     = flag.String("loop-exit", "count", "how a step loop ends: count (a constant trip count XLA can see) or data (also on a test of the tokens that always passes, as the decoder's loop ends on its state)")
	batches      = flag.String("batches", "1,8,64", "batch sizes for decoding")
	decodeOnly   = flag.String("decode", "", "time only the decoding cases whose name contains this (e.g. autoregressive; default: all)")
	newTokens    = flag.Int("new", 256, "tokens generated per prompt when decoding")
	readbackFlag = flag.Int("blocks-per-readback", 0, "diffusion.Config.BlocksPerReadback of the decoding cases, except the stream read after every block (0: the presets')")
	jsonOut      = flag.String("json", "", "also write the results as JSON to this file")
	fp8          = flag.String("fp8", "", "quantize the linear layers: weight-only or w8a8 (static activation scales calibrated on random tokens)")
	decoder      = flag.String("fp8-decoder", "lut", "in-graph FP8 decoder: lut or bits")
	fp8Head      = flag.Bool("fp8-head", false, "with -fp8, quantize lm_head too (quant.Options.QuantizeHead; by default it stays bfloat16)")
	prefillCap   = flag.Int("prefill-capacity", 0, "cache slots of the prefill timings (0: as many as prompt tokens; the decoder has prompt + new tokens + a block and a window, rounded up to 128)")
	prefillIn    = flag.Bool("prefill-inputs", false, "prefill timings take start, write length and the logits' position as program inputs, as the decoder's prefill does, instead of constants")
	prefillFresh = flag.Bool("prefill-fresh", false, "prefill timings upload their inputs each time (new tensors, as each Generate call has)")
	prefillFree  = flag.Bool("prefill-free", false, "with -prefill-fresh, free the previous inputs first")
	prefillToks  = flag.String("prefill-tokens", "512,2048", "comma-separated prompt lengths of the prefill timings")
	addedPrefill = flag.Int("added-prefills", 0, "also time device loops of 1 and of 1+N prefills and report the time each added prefill takes (0: not), free of each execution's own cost, as the peer's CUDA-graph prefill timed by CUDA events is; on backends that run loops on the device")
	cpuProfile   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof; the timed calls are under runAndWait)")
)

// row is one measurement.
type row struct {
	Name    string  `json:"name"`
	Batch   int     `json:"batch"`
	Median  float64 `json:"median_ms"`
	P10     float64 `json:"p10_ms"`
	P90     float64 `json:"p90_ms"`
	PerStep float64 `json:"tokens_per_step,omitempty"`
	TokPerS float64 `json:"tokens_per_s,omitempty"`
	Note    string  `json:"note,omitempty"`
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	if err := checkFlags(); err != nil {
		log.Fatal(err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b, choice, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("backend: %s", choice)
	m, err := loadModel(b)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("model: %s, %d layers, %s, weights %.2f GB", m.Config.Architecture, m.Config.NumLayers, m.DType,
		float64(m.WeightBytes())/1e9)

	// Each section's table is printed as soon as it is measured, so that a run cut
	// short by a time limit keeps what it measured.
	var rows []row
	parts := strings.Split(*only, ",")
	for _, section := range []struct {
		name  string
		bench func(*model.Model) []row
	}{{"steps", benchSteps}, {"prefill", benchPrefill}, {"decode", benchDecode}} {
		if slices.Contains(parts, section.name) {
			measured := section.bench(m)
			printTable(measured)
			rows = append(rows, measured...)
		}
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(rows, "", " ")
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func loadModel(b compute.Backend) (*model.Model, error) {
	dtype := model.DefaultDType(b)
	switch *dtypeFlag {
	case "":
	case "bfloat16":
		dtype = dtypes.BFloat16
	case "float32":
		dtype = dtypes.Float32
	default:
		return nil, fmt.Errorf("unknown -dtype %q", *dtypeFlag)
	}
	start := time.Now()
	defer func() { log.Printf("loaded in %s", time.Since(start).Round(time.Millisecond)) }()
	if *modelDir != "" {
		if *configFile != "" {
			return nil, errors.New("-model and -config: give one (-config builds random weights)")
		}
		return model.Load(b, *modelDir, model.LoadOptions{DType: dtype})
	}
	cfg, err := randomConfig(*configFile)
	if err != nil {
		return nil, err
	}
	if *layers > 0 {
		cfg.NumLayers = *layers
	}
	// Random weights generate EOS as readily as anything else: without it every
	// generation runs to its length, so runs are comparable.
	cfg.EOSTokenIDs = nil
	m, err := model.NewRandom(b, cfg, dtype, 1)
	if err != nil || *fp8 == "" {
		return m, err
	}
	if err := quantize(m); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

// randomConfig is the shape of the random model: MiniCPM5-2B's, or that of the
// config.json at path, its mask token the last vocabulary row where it names none (as
// block-diffusion checkpoints have it).
func randomConfig(path string) (model.Config, error) {
	if path == "" {
		return model.MiniCPM5_2B, nil
	}
	cfg, err := model.LoadConfig(path)
	if err != nil {
		return model.Config{}, fmt.Errorf("-config: %w", err)
	}
	if cfg.MaskTokenID < 0 {
		cfg.MaskTokenID = cfg.VocabSize - 1
	}
	return cfg, nil
}

// quantize replaces the model's linear layers with FP8 ones, as -fp8 says.
func quantize(m *model.Model) error {
	opts := quant.Options{QuantizeHead: *fp8Head}
	switch *decoder {
	case "lut":
	case "bits":
		opts.Decoder = quant.DecoderBits
	default:
		return fmt.Errorf("unknown -fp8-decoder %q", *decoder)
	}
	switch *fp8 {
	case "weight-only":
	case "w8a8":
		seqs, err := quant.RandomSequences(8, 64, m.Config.VocabSize, 1)
		if err != nil {
			return err
		}
		if opts.Calibration, err = quant.Calibrate(m, seqs, quant.CalibrateOptions{}); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown -fp8 %q (want weight-only or w8a8)", *fp8)
	}
	if err := quant.QuantizeModel(m, opts); err != nil {
		return err
	}
	head := "bfloat16 head"
	if *fp8Head {
		head = "FP8 head"
	}
	log.Printf("FP8 %s (%s decoder, %s): weights %.2f GB", *fp8, *decoder, head, float64(m.WeightBytes())/1e9)
	return nil
}
