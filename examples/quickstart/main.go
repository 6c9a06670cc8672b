// Command quickstart is the smallest program that generates text with blockdiff: it
// loads a checkpoint folder with blockdiff.Load and streams a completion.
//
//	go run ./examples/quickstart -model ~/models/MiniCPM5-2B-diffusion -prompt "Why is the sky blue?"
//
// With no -model it runs the demo model embedded in the repository (module demomodel),
// which completes Go code. examples/generate has every decoding option.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/blockdiff/blockdiff"
	"github.com/blockdiff/blockdiff/demomodel"
)

var (
	modelDir  = flag.String("model", "", "checkpoint folder (default: the embedded demo model)")
	prompt    = flag.String("prompt", "", "text to complete (default: a Go function's head for the demo model)")
	preset    = flag.String("preset", "quality", "decoder preset: quality or speed")
	maxTokens = flag.Int("max-tokens", 128, "maximum new tokens")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	if *modelDir == "" {
		dir, err := demomodel.Dir()
		if err != nil {
			return err
		}
		*modelDir = dir
		if *prompt == "" {
			*prompt = demomodel.Prompt
		}
	}
	engine, err := blockdiff.Load(ctx, *modelDir, blockdiff.Options{Preset: *preset, MaxNewTokens: *maxTokens})
	if err != nil {
		return err
	}
	defer engine.Close()

	fmt.Print(*prompt)
	for piece, err := range engine.Stream(ctx, *prompt) {
		if err != nil {
			return err
		}
		fmt.Print(piece)
	}
	fmt.Println()
	return nil
}
