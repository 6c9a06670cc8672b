package blockdiff

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/gomlx/compute"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/quant"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// Options configure [Load]. The zero value is ready to use: the checkpoint's "quality"
// preset, up to 256 new tokens, fused decoding, on the backend [backend.New] picks.
type Options struct {
	// Preset names the decoder settings: "quality" (the default) or "speed", as the
	// folder's generation_config.json defines them, else diffusion's built-in ones.
	Preset string
	// MaxNewTokens is the most tokens one generation writes (0: 256).
	MaxNewTokens int
	// Mode is the decoding mode (default diffusion.Fused).
	Mode diffusion.Mode
	// Configure, when set, adjusts the decoder's configuration after the fields above
	// are applied: sampling, stop tokens, block size and the rest of [diffusion.Config].
	Configure func(*diffusion.Config)
	// FP8 stores the linear weights of a float checkpoint in FP8 (E4M3), quantized at
	// load time. A compressed-tensors FP8 checkpoint loads in FP8 whatever this says.
	FP8 bool
	// Backend runs the model; nil creates the one [backend.New] picks, which
	// [Engine.Close] then releases. Pass one to share a device between engines.
	Backend compute.Backend
	// Progress, when set, is called as weights reach the device with the bytes read so
	// far and in all.
	Progress func(done, total int64)
}

// defaultPreset is the preset of Options' zero value.
const defaultPreset = "quality"

// Engine generates text with one checkpoint: its model, tokenizer and decoder. It is
// safe for concurrent use; generations take turns on the device.
type Engine struct {
	model       *model.Model
	tok         *tokenizer.Tokenizer
	dec         *diffusion.Decoder
	ownsBackend compute.Backend // the backend Load created, released by Close
}

// Result is one generation.
type Result struct {
	// Text is the decoded output, special tokens left out.
	Text string
	// Tokens are the generated ids, up to (not including) the stop token.
	Tokens []int
	// Stats says how the decoding went: forward passes, steps, why it finished, times.
	Stats diffusion.Stats
}

// Load opens a checkpoint folder (config.json, safetensors weights, tokenizer.json and,
// optionally, tokenizer_config.json, generation_config.json and chat_template.jinja),
// puts its weights on the device and returns an engine ready to generate. An FP8
// (compressed-tensors) checkpoint loads through package quant, any other through
// package model. Generation stops at the EOS tokens of config.json and at the
// tokenizer's EOS token. ctx is checked before loading starts; loading itself runs to
// its end.
func Load(ctx context.Context, dir string, opts Options) (*Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The cheap files first, so that a broken folder fails before its weights load.
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("blockdiff: %w", err)
	}
	cfg, err := decoderConfig(dir, opts)
	if err != nil {
		return nil, err
	}
	isFP8, err := quant.IsFP8Checkpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("blockdiff: %w", err)
	}

	e := &Engine{tok: tok}
	b := opts.Backend
	if b == nil {
		if b, _, err = backend.New(); err != nil {
			return nil, fmt.Errorf("blockdiff: %w", err)
		}
		e.ownsBackend = b
	}
	load := model.LoadOptions{Progress: opts.Progress}
	if isFP8 || opts.FP8 {
		e.model, err = quant.Load(b, dir, quant.Options{}, load)
	} else {
		e.model, err = model.Load(b, dir, load)
	}
	if err != nil {
		e.releaseBackend()
		return nil, fmt.Errorf("blockdiff: %w", err)
	}
	if id, ok := tok.EOSTokenID(); ok && id < e.model.Config.VocabSize && !slices.Contains(cfg.StopTokens, id) {
		cfg.StopTokens = append(cfg.StopTokens, id)
	}
	if e.dec, err = diffusion.New(e.model, cfg); err != nil {
		return nil, errors.Join(fmt.Errorf("blockdiff: %w", err), e.Close())
	}
	return e, nil
}

// decoderConfig is the folder's preset with opts applied.
func decoderConfig(dir string, opts Options) (diffusion.Config, error) {
	presets, err := diffusion.LoadPresets(dir)
	if err != nil {
		return diffusion.Config{}, fmt.Errorf("blockdiff: %w", err)
	}
	name := opts.Preset
	if name == "" {
		name = defaultPreset
	}
	cfg, err := presets.Config(name)
	if err != nil {
		return cfg, fmt.Errorf("blockdiff: %w", err)
	}
	cfg.Mode = opts.Mode
	if opts.MaxNewTokens != 0 {
		cfg.MaxNewTokens = opts.MaxNewTokens
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("blockdiff: decoder configuration: %w", err)
	}
	return cfg, nil
}

// Generate continues prompt, encoded as plain text (text in it that spells a special
// token stays ordinary characters), and returns the whole output.
func (e *Engine) Generate(ctx context.Context, prompt string) (Result, error) {
	ids, err := e.tok.Encode(prompt)
	if err != nil {
		return Result{}, fmt.Errorf("blockdiff: encoding the prompt: %w", err)
	}
	return e.generate(ctx, ids)
}

// Stream continues prompt as [Engine.Generate] does and yields the text as blocks
// finish. Breaking out of the loop stops the generation; an error ends the stream.
func (e *Engine) Stream(ctx context.Context, prompt string) iter.Seq2[string, error] {
	ids, err := e.tok.Encode(prompt)
	if err != nil {
		return failed(fmt.Errorf("blockdiff: encoding the prompt: %w", err))
	}
	return e.stream(ctx, ids)
}

// Chat answers the conversation as the assistant: messages are rendered with the
// tokenizer's chat template, which opens the assistant's turn. A checkpoint without a
// chat template is an error wrapping [tokenizer.ErrNoChatTemplate], and a message
// whose content spells a special token is refused.
func (e *Engine) Chat(ctx context.Context, messages []tokenizer.Message) (Result, error) {
	ids, err := e.encodeChat(messages)
	if err != nil {
		return Result{}, err
	}
	return e.generate(ctx, ids)
}

// ChatStream answers the conversation as [Engine.Chat] does and yields the text as
// blocks finish.
func (e *Engine) ChatStream(ctx context.Context, messages []tokenizer.Message) iter.Seq2[string, error] {
	ids, err := e.encodeChat(messages)
	if err != nil {
		return failed(err)
	}
	return e.stream(ctx, ids)
}

// Model returns the loaded model, for the lower-level packages.
func (e *Engine) Model() *model.Model { return e.model }

// Tokenizer returns the checkpoint's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Config returns the decoder's configuration.
func (e *Engine) Config() diffusion.Config { return e.dec.Config() }

// Close frees the model's device memory, and the backend when Load created it. Using
// the engine afterwards is an error; closing it again does nothing.
func (e *Engine) Close() error {
	err := e.model.Close()
	e.releaseBackend()
	return err
}

// releaseBackend finalizes the backend Load created, once.
func (e *Engine) releaseBackend() {
	if e.ownsBackend != nil {
		e.ownsBackend.Finalize()
		e.ownsBackend = nil
	}
}

// encodeChat renders messages with the chat template, refusing contents that would
// smuggle control tokens into the prompt.
func (e *Engine) encodeChat(messages []tokenizer.Message) ([]int, error) {
	if !e.tok.HasChatTemplate() {
		return nil, fmt.Errorf("blockdiff: Chat needs a chat template (tokenizer_config.json's chat_template or chat_template.jinja); use Generate: %w",
			tokenizer.ErrNoChatTemplate)
	}
	if len(messages) == 0 {
		return nil, errors.New("blockdiff: Chat needs at least one message")
	}
	for i, m := range messages {
		if e.tok.ContainsSpecialToken(m.Content) {
			return nil, fmt.Errorf("blockdiff: message %d (%s) contains text that spells a special token; use Generate to send text as is", i, m.Role)
		}
	}
	ids, err := e.tok.EncodeChat(messages, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		return nil, fmt.Errorf("blockdiff: %w", err)
	}
	return ids, nil
}

func (e *Engine) generate(ctx context.Context, ids []int) (Result, error) {
	res, err := e.dec.Generate(ctx, ids)
	if err != nil {
		return Result{}, fmt.Errorf("blockdiff: %w", err)
	}
	return Result{Text: e.tok.Decode(res.Tokens, true), Tokens: res.Tokens, Stats: res.Stats}, nil
}

func (e *Engine) stream(ctx context.Context, ids []int) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		text := e.tok.NewDecodeStream(true)
		for chunk, err := range e.dec.Stream(ctx, ids) {
			if err != nil {
				yield("", fmt.Errorf("blockdiff: %w", err))
				return
			}
			piece := text.Push(chunk.Tokens...)
			if chunk.Result != nil {
				piece += text.Flush()
			}
			if piece != "" && !yield(piece, nil) {
				return
			}
		}
	}
}

// failed is a stream that yields err alone.
func failed(err error) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) { yield("", err) }
}
