// Package blockdiff runs language models converted from autoregressive to block
// diffusion, from Go: on NVIDIA GPUs through XLA, and on any CPU in pure Go.
//
// A block-diffusion decoder writes text a block (of 4 tokens) at a time: each new block
// starts as [anchor, MASK, MASK, MASK], and denoise steps reveal, in parallel, the
// masked positions the model is confident about, so a block can take fewer forward
// passes than it has tokens.
//
// The packages, in the order data flows through them:
//
//   - [github.com/blockdiff/blockdiff/safetensors] reads and writes checkpoint files.
//   - [github.com/blockdiff/blockdiff/model] builds the MiniCPM / Llama forward pass
//     with block-causal attention and a KV cache, and loads weights onto the device.
//   - [github.com/blockdiff/blockdiff/quant] stores linear weights in FP8 (E4M3) with
//     static scales from a calibration pass.
//   - [github.com/blockdiff/blockdiff/diffusion] is the decoder: denoising, commits and
//     remasks run in a device-side loop.
//   - [github.com/blockdiff/blockdiff/tokenizer] turns text into ids and back, with chat
//     templates, exactly as Hugging Face tokenizers do.
//   - [github.com/blockdiff/blockdiff/backend] picks XLA on CUDA when it finds a plugin,
//     else the pure-Go backend.
//
// A minimal program:
//
//	b, _, err := backend.New()
//	m, err := model.Load(b, dir, model.LoadOptions{})
//	tok, err := tokenizer.LoadDir(dir)
//	ids, err := tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: "Hi!"}},
//		tokenizer.ChatOptions{AddGenerationPrompt: true})
//	dec, err := diffusion.New(m, diffusion.DefaultConfig())
//	res, err := dec.Generate(ctx, ids)
//	fmt.Println(tok.Decode(res.Tokens, true))
//
// See examples/generate for streaming, and examples/bench for measurements.
package blockdiff
