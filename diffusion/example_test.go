package diffusion_test

import (
	"context"
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/internal/demo"
)

// Streaming generation: tokens arrive block by block, then the whole result.
func ExampleDecoder_Stream() {
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	m, err := demo.Model(b) // a tiny random-weight model; use model.Load for a checkpoint
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	tok, err := demo.Tokenizer()
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := tok.Encode("Hello")
	if err != nil {
		log.Fatal(err)
	}

	cfg := diffusion.Speed // threshold 0.7, at least 2 reveals per step
	cfg.MaxNewTokens = 12
	dec, err := diffusion.New(m, cfg)
	if err != nil {
		log.Fatal(err)
	}
	text := tok.NewDecodeStream(true)
	streamed := 0
	for chunk, err := range dec.Stream(context.Background(), prompt) {
		if err != nil {
			log.Fatal(err)
		}
		_ = text.Push(chunk.Tokens...) // print it as it comes
		streamed += len(chunk.Tokens)
		if chunk.Result != nil {
			fmt.Println("streamed all tokens:", streamed == len(chunk.Result.Tokens))
			fmt.Println("within the limit:", len(chunk.Result.Tokens) <= cfg.MaxNewTokens)
		}
	}
	// Output:
	// streamed all tokens: true
	// within the limit: true
}
