package demomodel

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(FS(), "*")
	if err != nil || len(names) < 5 {
		t.Fatalf("embedded files %v: %v", names, err)
	}
	for _, name := range names {
		want, err := fs.ReadFile(FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: differs from the embedded file (%v)", name, err)
		}
	}
	again, err := Dir()
	if err != nil || again != dir {
		t.Fatalf("second call: %s, %v; want %s", again, err, dir)
	}
}
