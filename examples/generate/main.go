// Command generate decodes text with a block-diffusion checkpoint and streams it as
// blocks finish, then prints how the decoding went.
//
//	go run ./examples/generate -model ~/models/MiniCPM5-2B-diffusion -prompt "Why is the sky blue?"
//	go run ./examples/generate -model ~/models/MiniCPM5-2B-diffusion -messages chat.json
//
// where chat.json holds a conversation to continue, [{"role": "user", "content":
// "..."}, {"role": "assistant", "content": "..."}, ...].
//
// With no -model it runs the demo model embedded in the repository (module demomodel: a
// model trained in Go on the Go toolchain's source, converted to block diffusion, in
// FP8), offline, completing a Go function; -random runs a tiny random-weight model built
// in memory instead, whose text is noise.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/schollz/progressbar/v3"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/demomodel"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/demo"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/tokenizer"
)

var (
	modelDir    = flag.String("model", "", "checkpoint folder with config.json, tokenizer.json and safetensors weights (default: the embedded demo model)")
	random      = flag.Bool("random", false, "run a tiny model with random weights built in memory instead of the demo (its text is noise)")
	prompt      = flag.String("prompt", "", "the prompt (default: a Go function's head for the demo model, \"Once upon a time\" otherwise)")
	system      = flag.String("system", "", "a system message (chat checkpoints)")
	raw         = flag.Bool("raw", false, "encode the prompt as is, without the chat template")
	messages    = flag.String("messages", "", `a conversation to continue instead of -prompt and -system: a JSON file ("-": standard input) holding [{"role": "user", "content": "..."}, ...], rendered with the checkpoint's chat template`)
	preset      = flag.String("preset", "quality", "decoding preset: quality or speed, as the checkpoint's generation_config.json picks them (else threshold 0.9, 1 reveal; 0.7, 2)")
	mode        = flag.String("mode", "fused", "fused, reference or autoregressive")
	blockSize   = flag.Int("block", 0, "block size, 1 to 128 (0: the preset's, 4)")
	threshold   = flag.Float64("threshold", 0, "reveal threshold in [0, 1]: masked positions whose confidence is above it are revealed (0: all of them; default: the preset's)")
	minReveal   = flag.Int("min-reveal", 0, "minimum reveals per step, 1 to 128 (0: the preset's)")
	maxTokens   = flag.Int("max-tokens", 128, "maximum new tokens")
	readback    = flag.Int("blocks-per-readback", 0, "the most blocks the device decodes between host reads, 1 to 1024: the first read comes after one block, each later one after twice as many as the one before, up to this (0: the preset's, 64; autoregressive mode counts block-size tokens as a block; each read costs about 2 ms on an H200; 1 streams block by block)")
	temperature = flag.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK        = flag.Int("top-k", 0, "sample from the k most likely tokens (0: all)")
	topP        = flag.Float64("top-p", 1, "sample from the most likely tokens holding this probability (0 or 1: all)")
	seed        = flag.Int64("seed", 0, "sampling seed")
	stop        = flag.String("stop", "", `comma-separated tokens, as the vocabulary spells them (e.g. "<|im_end|>"), that end generation besides the checkpoint's EOS tokens`)
	fp8         = flag.Bool("fp8", false, "store linear weights in FP8 (E4M3): quantized at load time, or as an FP8 checkpoint stores them")
	calibration = flag.String("calibration", "", "calibration.json from examples/calibrate: FP8 activations with static scales (implies -fp8)")
	devices     = flag.Int("devices", 1, "GPUs the decoding spreads over, tensor-parallel (head counts and the FFN must divide over them); over several, our backend's plugin runs on go-xla's backend")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	choice := backend.ForDevices(backend.Select(), *devices)
	b, err := backend.NewWithConfig(choice.Config)
	if err != nil {
		return fmt.Errorf("backend: creating %s: %w", choice, err)
	}
	log.Printf("backend: %s", choice)

	m, tok, err := load(b)
	if err != nil {
		return err
	}
	defer m.Close()
	ids, err := encodePrompt(tok)
	if err != nil {
		return err
	}
	cfg, err := decodeConfig()
	if err != nil {
		return err
	}
	if cfg.StopTokens, err = stopTokens(tok); err != nil {
		return err
	}
	cfg.Devices = *devices
	dec, err := diffusion.New(m, cfg)
	if err != nil {
		return err
	}

	if *messages == "" {
		fmt.Print(*prompt)
	}
	text := tok.NewDecodeStream(true)
	for chunk, err := range dec.Stream(ctx, ids) {
		if err != nil {
			fmt.Println()
			return err
		}
		fmt.Print(text.Push(chunk.Tokens...))
		if chunk.Result != nil {
			fmt.Println(text.Flush())
			printStats(chunk.Result.Stats, cfg)
		}
	}
	return nil
}

// load returns the model and its tokenizer: the checkpoint's, or the demo's.
func load(b compute.Backend) (*model.Model, *tokenizer.Tokenizer, error) {
	if *random {
		if *modelDir != "" {
			return nil, nil, errors.New("-random and -model exclude each other")
		}
		log.Printf("-random: running a tiny model with RANDOM weights built in memory; its text is noise")
		if *prompt == "" {
			*prompt = "Once upon a time"
		}
		m, err := demo.Model(b)
		if err != nil {
			return nil, nil, err
		}
		if *fp8 || *calibration != "" {
			err = errors.Join(errors.New("-fp8 and -calibration need -model"), m.Close())
			return nil, nil, err
		}
		tok, err := demo.Tokenizer()
		return m, tok, err
	}
	if *modelDir == "" {
		dir, err := demomodel.Dir()
		if err != nil {
			return nil, nil, err
		}
		log.Printf("no -model given: the demo model (%s)", dir)
		*modelDir = dir
		if *prompt == "" {
			*prompt = demomodel.Prompt
		}
	}
	if *prompt == "" {
		*prompt = "Once upon a time"
	}
	tok, err := tokenizer.LoadDir(*modelDir)
	if err != nil {
		return nil, nil, err
	}
	bar := progressbar.DefaultBytes(-1, "loading weights")
	start := time.Now()
	opts := model.LoadOptions{Progress: func(done, total int64) {
		bar.ChangeMax64(total)
		_ = bar.Set64(done)
	}}
	var m *model.Model
	isFP8, err := quant.IsFP8Checkpoint(*modelDir)
	if err != nil {
		return nil, nil, err
	}
	if *fp8 || *calibration != "" || isFP8 {
		var q quant.Options
		if *calibration != "" {
			if q.Calibration, err = quant.ReadCalibration(*calibration); err != nil {
				return nil, nil, err
			}
		}
		m, err = quant.Load(b, *modelDir, q, opts)
	} else {
		m, err = model.Load(b, *modelDir, opts)
	}
	_ = bar.Finish()
	if err != nil {
		return nil, nil, err
	}
	log.Printf("loaded %s (%d layers, %s) in %s: %.2f GB of weights", m.Config.Architecture, m.Config.NumLayers,
		m.DType, time.Since(start).Round(time.Millisecond), float64(m.WeightBytes())/1e9)
	return m, tok, nil
}

// encodePrompt applies the chat template when the tokenizer has one (unless -raw), to
// -system and -prompt or to the conversation of -messages.
func encodePrompt(tok *tokenizer.Tokenizer) ([]int, error) {
	if *messages != "" {
		return encodeConversation(tok)
	}
	if *raw || !tok.HasChatTemplate() {
		return tok.Encode(*prompt)
	}
	var msgs []tokenizer.Message
	if *system != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: *system})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: *prompt})
	return encodeChat(tok, msgs)
}

// encodeConversation reads -messages and renders it with the chat template.
func encodeConversation(tok *tokenizer.Tokenizer) ([]int, error) {
	if err := conflictsWithMessages(flag.Visit); err != nil {
		return nil, err
	}
	if !tok.HasChatTemplate() {
		return nil, errors.New("-messages needs a checkpoint whose tokenizer_config.json has a chat template")
	}
	var data []byte
	var err error
	if *messages == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*messages)
	}
	if err != nil {
		return nil, fmt.Errorf("reading -messages: %w", err)
	}
	var msgs []tokenizer.Message // "role" and "content" match its fields
	if err := json.Unmarshal(data, &msgs); err != nil {
		return nil, fmt.Errorf("-messages %s: want a JSON array of {\"role\": ..., \"content\": ...}: %w", *messages, err)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("-messages %s holds no message", *messages)
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("-messages %s: message %d has no role", *messages, i)
		}
	}
	return encodeChat(tok, msgs)
}

// conflictsWithMessages says which of the flags that visit walks (those given) -messages
// replaces, nil if none.
func conflictsWithMessages(visit func(func(*flag.Flag))) error {
	var conflicting []string
	visit(func(f *flag.Flag) {
		if f.Name == "prompt" || f.Name == "system" || f.Name == "raw" {
			conflicting = append(conflicting, "-"+f.Name)
		}
	})
	if len(conflicting) > 0 {
		return fmt.Errorf("-messages holds the whole conversation: drop %s", strings.Join(conflicting, " and "))
	}
	return nil
}

// encodeChat renders msgs with the chat template, opening the assistant's turn. The
// user's text must not smuggle in control tokens: the template is rendered and its
// special tokens parsed, so text that spells one is refused.
func encodeChat(tok *tokenizer.Tokenizer, msgs []tokenizer.Message) ([]int, error) {
	for _, m := range msgs {
		if tok.ContainsSpecialToken(m.Content) {
			return nil, fmt.Errorf("a %s message contains text that spells a special token; use -prompt with -raw to send text as is", m.Role)
		}
	}
	return tok.EncodeChat(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
}

// stopTokens is the IDs of -stop's tokens in tok's vocabulary.
func stopTokens(tok *tokenizer.Tokenizer) ([]int, error) {
	if *stop == "" {
		return nil, nil
	}
	var ids []int
	for token := range strings.SplitSeq(*stop, ",") {
		id, ok := tok.TokenToID(token)
		if !ok {
			return nil, fmt.Errorf("-stop: %q is not a token of this vocabulary", token)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// decodeConfig starts from the preset and applies the flags given on the command line.
func decodeConfig() (diffusion.Config, error) {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return decodeConfigGiven(given)
}

// decodeConfigGiven starts from the preset and applies the flags: -threshold when
// given, the size flags when not 0. Values out of range are errors naming the flag.
func decodeConfigGiven(given map[string]bool) (diffusion.Config, error) {
	presets := diffusion.BuiltinPresets()
	if *modelDir != "" {
		var err error
		if presets, err = diffusion.LoadPresets(*modelDir); err != nil {
			return diffusion.Config{}, err
		}
	}
	cfg, err := presets.Config(*preset)
	if err != nil {
		return cfg, fmt.Errorf("-preset: %w", err)
	}
	if cfg.Mode, err = diffusion.ParseMode(*mode); err != nil {
		return cfg, fmt.Errorf("-mode: %w", err)
	}
	var errs []error
	size := func(name string, value, most int, dst *int) {
		switch {
		case value < 0 || value > most:
			errs = append(errs, fmt.Errorf("-%s %d: want 1 to %d (0: the preset's)", name, value, most))
		case value > 0:
			*dst = value
		}
	}
	size("block", *blockSize, diffusion.MaxBlockSize, &cfg.BlockSize)
	size("min-reveal", *minReveal, diffusion.MaxBlockSize, &cfg.MinReveal)
	size("blocks-per-readback", *readback, diffusion.MaxBlocksPerReadback, &cfg.BlocksPerReadback)
	if given["threshold"] {
		if !(*threshold >= 0 && *threshold <= 1) {
			errs = append(errs, fmt.Errorf("-threshold %g: want a value in [0, 1]", *threshold))
		}
		cfg.Threshold = *threshold
	}
	if *maxTokens < 1 || *maxTokens > model.MaxPositions {
		errs = append(errs, fmt.Errorf("-max-tokens %d: want 1 to %d", *maxTokens, model.MaxPositions))
	}
	if !(*temperature >= 0) || math.IsInf(*temperature, 1) {
		errs = append(errs, fmt.Errorf("-temperature %g: want a finite value of 0 or more", *temperature))
	}
	if *topK < 0 || *topK > model.MaxVocabSize {
		errs = append(errs, fmt.Errorf("-top-k %d: want 0 (all) to %d", *topK, model.MaxVocabSize))
	}
	if !(*topP >= 0 && *topP <= 1) {
		errs = append(errs, fmt.Errorf("-top-p %g: want a value in [0, 1]", *topP))
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	cfg.MaxNewTokens, cfg.Temperature, cfg.TopK, cfg.TopP, cfg.Seed = *maxTokens, *temperature, *topK, *topP, *seed
	return cfg, cfg.Validate()
}

func printStats(s diffusion.Stats, cfg diffusion.Config) {
	if cfg.Mode == diffusion.Autoregressive { // one token per forward: block size and thresholds do not apply
		fmt.Fprintf(os.Stderr, "\n%s mode\n", cfg.Mode)
	} else {
		fmt.Fprintf(os.Stderr, "\n%s mode, block %d, threshold %g, min reveal %d\n", cfg.Mode, cfg.BlockSize, cfg.Threshold, cfg.MinReveal)
	}
	fmt.Fprintf(os.Stderr, "finish: %s, %d tokens, %d forwards (%.2f tokens per forward: %d denoise steps, %d commits, %d remasks)\n",
		s.Finish, s.Tokens, s.Forwards, s.TokensPerForward, s.DenoiseSteps, s.Commits, s.Remasks)
	fmt.Fprintf(os.Stderr, "prefill %s, decode %s, %.1f tokens/s, %d executions and %d host reads\n",
		s.PrefillTime.Round(time.Microsecond), s.DecodeTime.Round(time.Microsecond), s.TokensPerSecond(), s.Execs, s.Readbacks)
}
