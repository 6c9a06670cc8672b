// Command gocorpus prepares the Go-toolchain corpus for training: it trains the byte-level
// BPE tokenizer on the train split, encodes every split into a token-id file, checks that
// every held-out file decodes back to itself, and packs the held-out files with their ids
// for the check against the Hugging Face tokenizers library (hfcheck.py).
//
// Usage:
//
//	GOTOOLCHAIN=go1.27.3 go run ./internal/gocorpus/cmd/gocorpus -out DIR [-vocab 8192] [-root TOOLCHAIN_DIR] [-tokenizer DIR]
//
// It writes DIR/tokenizer/{tokenizer.json,tokenizer_config.json} (unless -tokenizer names
// an existing one), DIR/{train,validation,heldout}.ids and DIR/{validation,heldout}.jsonl.gz, one JSON
// object {"path", "text", "ids"} per file (the held-out one then per synthetic text), the ids
// without BOS and EOS.
package main

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"time"

	"github.com/blockdiff/blockdiff/internal/gocorpus"
	"github.com/blockdiff/blockdiff/internal/tokfile"
	"github.com/blockdiff/blockdiff/tokenizer"
)

func main() {
	out := flag.String("out", "", "output directory (required)")
	root := flag.String("root", "", "toolchain directory (default: the go1.27.3 toolchain in the module cache)")
	vocab := flag.Int("vocab", 8192, "vocabulary size, special tokens included")
	tokDir := flag.String("tokenizer", "", "use the tokenizer in this directory instead of training one")
	flag.Parse()
	if *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *root, *tokDir, *vocab); err != nil {
		fmt.Fprintln(os.Stderr, "gocorpus:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, root, tokDir string, vocab int) error {
	var err error
	if root == "" {
		if root, err = gocorpus.DefaultRoot(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	c, err := gocorpus.Load(ctx, root)
	if err != nil {
		return err
	}
	fmt.Printf("corpus %s (%s) loaded in %.1fs; skipped %v\n", c.Root, c.Version, time.Since(start).Seconds(), c.Skipped)
	for _, s := range gocorpus.Splits {
		st := c.Stats(s)
		fmt.Printf("  %-10s %5d files %4d dirs %7.2f MB  sha256 %s\n", s, st.Files, st.Dirs, float64(st.Bytes)/1e6, st.SHA256)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	var tok *tokenizer.Tokenizer
	if tokDir != "" {
		if tok, err = tokenizer.LoadDir(tokDir); err != nil {
			return err
		}
		fmt.Printf("tokenizer loaded from %s: %d ids\n", tokDir, tok.VocabSize())
	} else {
		start = time.Now()
		b, err := tokenizer.Train(ctx, c.Texts(gocorpus.Train), tokenizer.TrainConfig{VocabSize: vocab})
		if err != nil {
			return err
		}
		fmt.Printf("tokenizer trained in %.1fs on %d CPUs: %d ids, %d merges\n",
			time.Since(start).Seconds(), runtime.GOMAXPROCS(0), b.VocabSize(), b.NumMerges())
		dir := filepath.Join(out, "tokenizer")
		if err := b.WriteDir(dir); err != nil {
			return err
		}
		if tok, err = tokenizer.LoadDir(dir); err != nil {
			return err
		}
		tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			return err
		}
		fmt.Printf("  wrote %s, tokenizer.json sha256 %x\n", dir, sha256.Sum256(tj))
	}

	for _, s := range gocorpus.Splits {
		files := c.Split(s)
		texts := make([]string, len(files))
		var n int64
		for i, f := range files {
			texts[i] = f.Text
			n += int64(len(f.Text))
		}
		start = time.Now()
		ids, err := tokfile.EncodeDocs(ctx, tok, texts)
		if err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		path := filepath.Join(out, s.String()+".ids")
		if err := tokfile.WriteFile(path, tok.VocabSize(), ids); err != nil {
			return err
		}
		body := len(ids) - 2*len(texts) // without BOS and EOS
		fmt.Printf("  %-10s %9d tokens (%d with BOS/EOS) %.4f tokens/byte %.2f bytes/token, encoded in %.1fs -> %s\n",
			s, body, len(ids), float64(body)/float64(n), float64(n)/float64(body), secs, path)
	}
	if err := writeTexts(ctx, filepath.Join(out, "validation.jsonl.gz"), tok, c.Split(gocorpus.Validation), false); err != nil {
		return err
	}
	return writeTexts(ctx, filepath.Join(out, "heldout.jsonl.gz"), tok, c.Split(gocorpus.HeldOut), true)
}

// synthetic are texts beyond the corpus for the comparison with the Hugging Face library:
// special tokens spelled out, non-ASCII letters, digits, odd white space, contractions.
var synthetic = []string{
	"<|eos|> x <|bos|><|mask|><|pad|>",
	"héllo wörld ✓ 日本語 🙂 Ωmega ǅ",
	"a\r\n\tb  \n\n  \t\r\n",
	"x := 1234567.89e10 + 0x1F_FF",
	"it's 'S 'RE 'll 'ſ don'T",
	"  leading and trailing  ",
	"\u00a0nbsp\u2003em\u3000ideographic space\u200b",
	"١٢٣ ½ ⅷ",
	"",
}

// writeTexts checks the exact round trip of every file and writes them with their ids
// (gocorpus.ReadTexts reads them), then, with synth, the synthetic texts as
// "synthetic/N", as gzipped JSON lines.
func writeTexts(ctx context.Context, path string, tok *tokenizer.Tokenizer, files []gocorpus.File, synth bool) error {
	for i, s := range synthetic {
		if synth {
			files = append(files, gocorpus.File{Path: fmt.Sprintf("synthetic/%d", i), Text: s})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	enc.SetEscapeHTML(false)
	bad := 0
	for _, file := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		ids, err := tok.EncodeWith(file.Text, tokenizer.EncodeOptions{})
		if err != nil {
			return fmt.Errorf("%s: %w", file.Path, err)
		}
		if tok.Decode(ids, false) != file.Text {
			bad++
			fmt.Printf("  round trip differs: %s\n", file.Path)
		}
		rec := struct {
			Path string `json:"path"`
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		}{file.Path, file.Text, ids}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("round trip: %d of %d texts exact (held-out files and %d synthetic); wrote %s\n", len(files)-bad, len(files), len(synthetic), path)
	if bad > 0 {
		return fmt.Errorf("%d held-out files do not round-trip", bad)
	}
	return nil
}
