// Package blockdiff runs language models converted from autoregressive to block
// diffusion, from Go: on NVIDIA GPUs through XLA, and on any CPU in pure Go.
//
// A block-diffusion decoder writes text a block (of 4 tokens) at a time: each new block
// starts as [anchor, MASK, MASK, MASK], and denoise steps reveal, in parallel, the
// masked positions the model is confident about, so a block can take fewer forward
// passes than it has tokens.
//
// [Load] opens a checkpoint folder and returns an [Engine]: the backend [backend.New]
// picks, the model (in FP8 when the folder is a compressed-tensors FP8 checkpoint), its
// tokenizer and the decoder presets of its generation_config.json:
//
//	engine, err := blockdiff.Load(ctx, dir, blockdiff.Options{}) // the "quality" preset
//	defer engine.Close()
//	res, err := engine.Generate(ctx, "Once upon a time")       // res.Text, res.Stats
//	for piece, err := range engine.Stream(ctx, prompt) { … }    // text as blocks finish
//	res, err = engine.Chat(ctx, []tokenizer.Message{{Role: "user", Content: "Hi!"}})
//
// The packages below it are for programs that need more control, in the order data
// flows through them:
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
//   - [github.com/blockdiff/blockdiff/train] trains and converts models from token-ids
//     files.
//
// examples/quickstart is the smallest program; examples/generate has every decoding
// option, and examples/bench measures.
package blockdiff
