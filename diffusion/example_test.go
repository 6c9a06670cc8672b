package diffusion_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/diffusion"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// Streaming generation: tokens arrive block by block, then the whole result. The model
// is a tiny one with random weights behind a byte-level tokenizer, so its text is
// noise; model.Load and tokenizer.LoadDir open a checkpoint.
func ExampleDecoder_Stream() {
	ctx := context.Background()
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	// 256 byte tokens, then BOS, EOS, pad and mask.
	bpe, err := tokenizer.Train(ctx, slices.Values([]string{"Hello"}), tokenizer.TrainConfig{VocabSize: 260})
	if err != nil {
		log.Fatal(err)
	}
	tok, err := bpe.Tokenizer()
	if err != nil {
		log.Fatal(err)
	}
	bos, _ := tok.BOSTokenID()
	eos, _ := tok.EOSTokenID()
	mask, _ := tok.TokenToID(tokenizer.DefaultMaskToken)
	m, err := model.NewRandom(b, model.Config{
		Architecture: model.ArchLlama, VocabSize: tok.VocabSize(), HiddenSize: 128, IntermediateSize: 256,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 32, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e4, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 128,
		BOSTokenID: bos, EOSTokenIDs: []int{eos}, MaskTokenID: mask,
	}, model.DefaultDType(b), 1)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
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
	for chunk, err := range dec.Stream(ctx, prompt) {
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
