// Package demomodel embeds blockdiff's demo checkpoint: a 27 M-parameter Llama-shaped model
// trained in Go on the Go toolchain's own source (examples/train), converted to block
// diffusion and stored with FP8 weights (bf16 activations). It writes Go-like code: it is
// small and greedy decoding makes it repeat itself.
//
// It is a module of its own (the repository's go.work includes it), so that `go get` of
// the library never downloads its 31 MB of weights.
package demomodel

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed model
var files embed.FS

// Prompt is the demo's default prompt: a documented Go function's head, the kind of
// text its decoder presets were picked on.
const Prompt = "package strings\n\n// Reverse returns s with its bytes in reverse order.\nfunc Reverse(s string) string {\n"

// FS returns the checkpoint folder's files.
func FS() fs.FS {
	sub, err := fs.Sub(files, "model")
	if err != nil {
		panic(err) // "model" is embedded: unreachable
	}
	return sub
}

// Dir returns a folder holding the checkpoint, which model.Load and tokenizer.LoadDir
// open: a folder under the user's cache directory named by the checkpoint's digest,
// written on first use.
func Dir() (string, error) {
	fsys := FS()
	names, err := fs.Glob(fsys, "*")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "blockdiff", "demo-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, nil
	}
	// Written into a temporary folder, then renamed: a folder of that name is complete.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("demomodel: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".demo-")
	if err != nil {
		return "", fmt.Errorf("demomodel: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range names {
		if err := copyOut(fsys, name, filepath.Join(tmp, name)); err != nil {
			return "", fmt.Errorf("demomodel: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "config.json")); statErr == nil {
			return dir, nil // another process wrote it first
		}
		return "", fmt.Errorf("demomodel: %w", err)
	}
	return dir, nil
}

func copyOut(fsys fs.FS, name, path string) error {
	in, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
