package safetensors_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/blockdiff/blockdiff/safetensors"
	"github.com/gomlx/compute/dtypes"
)

// Write a checkpoint, then open its folder and read a bfloat16 tensor as float32.
func Example() {
	dir, err := os.MkdirTemp("", "checkpoint")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	var w safetensors.Writer
	if err := w.SetMetadata("format", "pt"); err != nil {
		log.Fatal(err)
	}
	if err := w.AddFloat32s("embed.weight", safetensors.BF16, []int{2, 2}, []float32{1, 2.5, -3, 0.125}); err != nil {
		log.Fatal(err)
	}
	if err := w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)); err != nil {
		log.Fatal(err)
	}

	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer ckpt.Close()
	fmt.Println(ckpt.Metadata())
	for _, info := range ckpt.Tensors() {
		fmt.Println(info.Name, info.DType, info.Shape, info.ByteSize(), "bytes")
	}
	values, err := ckpt.Float32s("embed.weight")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(values)
	tensor, err := ckpt.TensorAs("embed.weight", dtypes.Float32)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tensor.Shape())
	// Output:
	// map[format:pt]
	// embed.weight BF16 [2 2] 8 bytes
	// [1 2.5 -3 0.125]
	// (Float32)[2, 2]
}

// Open a file and list its tensors with their place in the file.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "weights.safetensors")
	var w safetensors.Writer
	if err := w.Add("ids", safetensors.I64, []int{2}, []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		log.Fatal(err)
	}
	if err := w.Add("mask", safetensors.Bool, []int{2}, []byte{1, 0}); err != nil {
		log.Fatal(err)
	}
	if err := w.WriteFile(path); err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for _, info := range f.Tensors() {
		begin, end := info.FileOffsets()
		fmt.Printf("%s %s %v: data [%d, %d), file [%d, %d)\n", info.Name, info.DType, info.Shape, info.Begin, info.End, begin, end)
	}
	// Output:
	// ids I64 [2]: data [0, 16), file [128, 144)
	// mask BOOL [2]: data [16, 18), file [144, 146)
}
