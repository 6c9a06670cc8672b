package blockdiff_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/blockdiff/blockdiff"
	"github.com/blockdiff/blockdiff/tokenizer"
)

// Load a checkpoint folder and complete a prompt. examples/quickstart runs this on the
// demo model embedded in the repository.
func Example() {
	ctx := context.Background()
	dir := os.Getenv("BLOCKDIFF_MODEL") // a checkpoint folder: config.json, weights, tokenizer.json
	engine, err := blockdiff.Load(ctx, dir, blockdiff.Options{MaxNewTokens: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	res, err := engine.Generate(ctx, "func Reverse(s string) string {\n")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
	fmt.Printf("%d tokens in %d forward passes (%s)\n", res.Stats.Tokens, res.Stats.Forwards, res.Stats.Finish)
}

// Print the text as blocks finish.
func ExampleEngine_Stream() {
	ctx := context.Background()
	engine, err := blockdiff.Load(ctx, os.Getenv("BLOCKDIFF_MODEL"), blockdiff.Options{Preset: "speed"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	for piece, err := range engine.Stream(ctx, "Once upon a time") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(piece)
	}
	fmt.Println()
}

// Answer a conversation with the checkpoint's chat template.
func ExampleEngine_Chat() {
	ctx := context.Background()
	engine, err := blockdiff.Load(ctx, os.Getenv("BLOCKDIFF_MODEL"), blockdiff.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	res, err := engine.Chat(ctx, []tokenizer.Message{
		{Role: "system", Content: "You answer in one sentence."},
		{Role: "user", Content: "Why is the sky blue?"},
	})
	if err != nil {
		log.Fatal(err) // wraps tokenizer.ErrNoChatTemplate when the checkpoint has none
	}
	fmt.Println(res.Text)
}
