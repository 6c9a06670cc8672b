// Command inspect lists a checkpoint's tensors (name, dtype, shape, size), its
// configuration, and the device memory it needs.
//
//	go run ./examples/inspect -model ~/models/MiniCPM5-2B-diffusion
//
// Without -model it writes a small safetensors file of its own and inspects that.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

var (
	modelDir = flag.String("model", "", "checkpoint folder or .safetensors file (default: a small file written here)")
	context_ = flag.Int("context", 4096, "positions per sequence for the KV-cache estimate")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if err := checkContext(*context_); err != nil {
		log.Fatal(err)
	}
	path := *modelDir
	if path == "" {
		dir, err := os.MkdirTemp("", "blockdiff-inspect")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if path, err = writeExample(dir); err != nil {
			log.Fatal(err)
		}
		log.Printf("no -model given: inspecting a small file written to %s", path)
	}
	if err := inspect(path); err != nil {
		log.Fatal(err)
	}
}

// checkContext refuses a -context out of range.
func checkContext(n int) error {
	if n < 1 || n > model.MaxPositions {
		return fmt.Errorf("-context %d: want 1 to %d positions", n, model.MaxPositions)
	}
	return nil
}

// writeExample writes a few tensors of different dtypes with metadata.
func writeExample(dir string) (string, error) {
	var w safetensors.Writer
	if err := w.SetMetadata("format", "pt"); err != nil {
		return "", err
	}
	embed := make([]float32, 16*8)
	for i := range embed {
		embed[i] = float32(i%7) / 7
	}
	steps := []error{
		w.AddFloat32s("model.embed_tokens.weight", safetensors.BF16, []int{16, 8}, embed),
		w.AddFloat32s("model.norm.weight", safetensors.F32, []int{8}, embed[:8]),
		w.Add("step", safetensors.I64, nil, make([]byte, 8)),
	}
	for _, err := range steps {
		if err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "example.safetensors")
	return path, w.WriteFile(path)
}

func inspect(path string) error {
	var ckpt safetensors.Checkpoint
	var err error
	if info, statErr := os.Stat(path); statErr == nil && info.IsDir() {
		ckpt, err = safetensors.OpenCheckpoint(path)
	} else {
		ckpt, err = safetensors.Open(path)
	}
	if err != nil {
		return err
	}
	defer ckpt.Close()

	infos := ckpt.Tensors()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "tensor\tdtype\tshape\tbytes")
	byDType := map[safetensors.DType]int64{}
	var total, elements int64
	for _, t := range infos {
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", t.Name, t.DType, t.Shape, size(t.ByteSize()))
		byDType[t.DType] += t.ByteSize()
		total += t.ByteSize()
		elements += t.NumElements()
	}
	w.Flush()
	fmt.Printf("\n%d tensors, %s", len(infos), size(total))
	dts := make([]safetensors.DType, 0, len(byDType))
	for dt := range byDType {
		dts = append(dts, dt)
	}
	sort.Slice(dts, func(i, j int) bool { return dts[i] < dts[j] })
	for _, dt := range dts {
		fmt.Printf("; %s %s", dt, size(byDType[dt]))
	}
	fmt.Println()
	if md := ckpt.Metadata(); len(md) > 0 {
		fmt.Printf("metadata: %v\n", md)
	}

	cfg, err := model.LoadConfig(path)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(path, "config.json")); statErr != nil {
			return nil // a bare file: no configuration to show
		}
		return err
	}
	fmt.Printf("\nconfig: %s, hidden %d, %d layers, %d heads (%d key-value) of %d, FFN %d, vocabulary %d, tied head %t, mask token %d\n",
		cfg.Architecture, cfg.HiddenSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim,
		cfg.IntermediateSize, cfg.VocabSize, cfg.TieWordEmbeddings, cfg.MaskTokenID)
	kvPerToken := int64(2 * cfg.NumLayers * cfg.NumKVHeads * cfg.HeadDim * 2) // keys and values, bf16
	fmt.Printf("device memory in bf16: weights %s; KV cache %s per position, %s for %d positions\n",
		size(2*elements), size(kvPerToken), size(kvPerToken*int64(*context_)), *context_)
	return nil
}

// size formats a byte count.
func size(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
