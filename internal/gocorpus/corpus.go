package gocorpus

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ToolchainVersion is the Go release whose source DefaultRoot looks for.
const ToolchainVersion = "go1.27.3"

// Filter thresholds (see the package documentation).
const (
	// MaxFileBytes is the largest file kept.
	MaxFileBytes = 512 << 10
	// MaxLineBytes is the longest line a kept file may have.
	MaxLineBytes = 1024
	// MaxNumericFraction is the largest share of numeric-literal bytes a kept file may have.
	MaxNumericFraction = 0.75
)

// Split names the part of the corpus a file belongs to.
type Split uint8

// The splits, in the order Splits lists them.
const (
	Train Split = iota
	Validation
	HeldOut
)

// Splits lists every split.
var Splits = []Split{Train, Validation, HeldOut}

// String returns "train", "validation" or "heldout".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Validation:
		return "validation"
	case HeldOut:
		return "heldout"
	}
	return fmt.Sprintf("Split(%d)", uint8(s))
}

// Split shares, in units of 1/10000 of the directories.
const (
	heldOutShare    = 500
	validationShare = 250
	splitSalt       = "blockdiff/gocorpus split v1\x00"
)

// MaxEvalDirBytes is the most kept bytes a directory may hold and still be held out or
// used for validation: the few giant packages (runtime, the compiler's SSA backend, ...)
// always train, so that no single package dominates an evaluation split.
const MaxEvalDirBytes = 1 << 20

// SplitOf returns the split of the files in dir, a slash-separated directory path relative
// to the toolchain's src directory (such as "net/http"), whose kept files hold dirBytes
// bytes in all. It depends on nothing else.
func SplitOf(dir string, dirBytes int64) Split {
	if dirBytes > MaxEvalDirBytes {
		return Train
	}
	h := sha256.Sum256([]byte(splitSalt + dir))
	switch v := binary.BigEndian.Uint64(h[:8]) % 10000; {
	case v < heldOutShare:
		return HeldOut
	case v < heldOutShare+validationShare:
		return Validation
	}
	return Train
}

// File is one source file of the corpus.
type File struct {
	// Path is slash-separated and relative to the toolchain's src directory ("fmt/print.go").
	Path string
	// Text is the file's content.
	Text string
	// Split is the split of the file's directory.
	Split Split
}

// Corpus is the filtered source of one toolchain.
type Corpus struct {
	// Root is the toolchain directory Load read.
	Root string
	// Version is the first line of the toolchain's VERSION file ("" when it has none).
	Version string
	// Files holds the kept files, sorted by Path.
	Files []File
	// Skipped counts the .go files left out, by reason: "testdata", "vendor", "size",
	// "binary", "generated", "long line", "table", "duplicate".
	Skipped map[string]int
}

// DefaultRoot finds the go1.27.3 toolchain module in the module cache (the directory
// "golang.org/toolchain@v0.0.1-go1.27.3.<os>-<arch>" below `go env GOMODCACHE`). The go
// command puts it there when it runs with GOTOOLCHAIN=go1.27.3.
func DefaultRoot(ctx context.Context) (string, error) {
	cache, err := modCache(ctx)
	if err != nil {
		return "", err
	}
	pattern := filepath.Join(cache, "golang.org", "toolchain@v0.0.1-"+ToolchainVersion+".*")
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return "", fmt.Errorf("gocorpus: %w", err)
	}
	slices.Sort(matches)
	for _, m := range matches {
		if st, err := os.Stat(filepath.Join(m, "src")); err == nil && st.IsDir() {
			return m, nil
		}
	}
	return "", fmt.Errorf("gocorpus: no toolchain source matches %s (running any go command with GOTOOLCHAIN=%s fetches it)", pattern, ToolchainVersion)
}

// modCache returns the module cache directory: `go env GOMODCACHE`, or when the go command
// cannot run, $GOMODCACHE, else the first $GOPATH entry's pkg/mod, else ~/go/pkg/mod.
func modCache(ctx context.Context) (string, error) {
	if out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" {
			return dir, nil
		}
	}
	if dir := os.Getenv("GOMODCACHE"); dir != "" {
		return dir, nil
	}
	if gp := filepath.SplitList(os.Getenv("GOPATH")); len(gp) > 0 && gp[0] != "" {
		return filepath.Join(gp[0], "pkg", "mod"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("gocorpus: finding the module cache: %w", err)
	}
	return filepath.Join(home, "go", "pkg", "mod"), nil
}

var generatedLine = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// Load reads and filters the .go files below root/src, root being a toolchain directory
// such as DefaultRoot returns.
func Load(ctx context.Context, root string) (*Corpus, error) {
	src := filepath.Join(root, "src")
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("gocorpus: %s is not a toolchain directory: no src directory", root)
	}
	c := &Corpus{Root: root, Skipped: map[string]int{}}
	if v, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
		c.Version, _, _ = strings.Cut(string(v), "\n")
	}
	var paths []string
	err := fs.WalkDir(os.DirFS(src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".go") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gocorpus: walking %s: %w", src, err)
	}
	slices.Sort(paths)
	seen := map[[sha256.Size]byte]bool{}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if reason := skipDir(p); reason != "" {
			c.Skipped[reason]++
			continue
		}
		full := filepath.Join(src, filepath.FromSlash(p))
		st, err := os.Stat(full)
		if err != nil {
			return nil, fmt.Errorf("gocorpus: %w", err)
		}
		if st.Size() > MaxFileBytes {
			c.Skipped["size"]++
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("gocorpus: %w", err)
		}
		if reason := skipContent(data); reason != "" {
			c.Skipped[reason]++
			continue
		}
		sum := sha256.Sum256(data)
		if seen[sum] {
			c.Skipped["duplicate"]++
			continue
		}
		seen[sum] = true
		c.Files = append(c.Files, File{Path: p, Text: string(data)})
	}
	dirBytes := map[string]int64{}
	for _, f := range c.Files {
		dirBytes[path.Dir(f.Path)] += int64(len(f.Text))
	}
	for i := range c.Files {
		d := path.Dir(c.Files[i].Path)
		c.Files[i].Split = SplitOf(d, dirBytes[d])
	}
	return c, nil
}

// skipDir returns why a file at slash path p is left out for its directories, or "".
func skipDir(p string) string {
	for _, dir := range strings.Split(path.Dir(p), "/") {
		if dir == "testdata" || dir == "vendor" {
			return dir
		}
	}
	return ""
}

// skipContent returns why a file with content data is left out, or "".
func skipContent(data []byte) string {
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return "binary"
	}
	if generatedLine.Match(data) {
		return "generated"
	}
	if longestLine(data) > MaxLineBytes {
		return "long line"
	}
	if numericFraction(data) > MaxNumericFraction {
		return "table"
	}
	return ""
}

func longestLine(data []byte) int {
	longest := 0
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			i = len(data)
		}
		longest = max(longest, i)
		data = data[min(i+1, len(data)):]
	}
	return longest
}

// numericFraction returns the share of numeric-literal bytes among the bytes that are not
// white space or commas. A numeric literal is a run of letters, digits and underscores that
// starts with a digit and does not continue an identifier ("0x1F", "1e9", "42").
func numericFraction(data []byte) float64 {
	counted, numeric := 0, 0
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
			continue
		case isDigit(c) && (i == 0 || !isWordByte(data[i-1])):
			j := i
			for j < len(data) && isWordByte(data[j]) {
				j++
			}
			counted += j - i
			numeric += j - i
			i = j
			continue
		}
		counted++
		i++
	}
	if counted == 0 {
		return 0
	}
	return float64(numeric) / float64(counted)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isWordByte(c byte) bool {
	return isDigit(c) || c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= utf8.RuneSelf
}

// Split returns the files of split s, in corpus order.
func (c *Corpus) Split(s Split) []File {
	var out []File
	for _, f := range c.Files {
		if f.Split == s {
			out = append(out, f)
		}
	}
	return out
}

// Texts yields the texts of the files of split s, in corpus order.
func (c *Corpus) Texts(s Split) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, f := range c.Files {
			if f.Split == s && !yield(f.Text) {
				return
			}
		}
	}
}

// SplitStats describes one split.
type SplitStats struct {
	Files, Dirs int
	Bytes       int64
	// SHA256 is a hex digest of the split's paths and contents in order, equal on every
	// machine that has the same toolchain.
	SHA256 string
}

// Stats describes split s.
func (c *Corpus) Stats(s Split) SplitStats {
	var st SplitStats
	h := sha256.New()
	dirs := map[string]bool{}
	var n [8]byte
	for _, f := range c.Split(s) {
		st.Files++
		st.Bytes += int64(len(f.Text))
		dirs[path.Dir(f.Path)] = true
		for _, part := range []string{f.Path, f.Text} {
			binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write([]byte(part))
		}
	}
	st.Dirs = len(dirs)
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	return st
}

// ErrNoToolchain is returned by LoadDefault when the toolchain source is absent.
var ErrNoToolchain = errors.New("gocorpus: toolchain source not found")

// LoadDefault loads the corpus at DefaultRoot. Its error wraps ErrNoToolchain when the
// toolchain is not in the module cache.
func LoadDefault(ctx context.Context) (*Corpus, error) {
	root, err := DefaultRoot(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoToolchain, err)
	}
	return Load(ctx, root)
}

// maxTextsBytes bounds what ReadTexts decompresses.
const maxTextsBytes = 1 << 30

// ReadTexts reads the files of a split as the gocorpus command writes them: gzipped JSON
// lines of {"path", "text", "ids"}; the ids are not kept.
func ReadTexts(path string) ([]File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gocorpus: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("gocorpus: %s: %w", path, err)
	}
	dec := json.NewDecoder(io.LimitReader(zr, maxTextsBytes))
	var files []File
	for {
		var rec struct {
			Path string `json:"path"`
			Text string `json:"text"`
		}
		if err := dec.Decode(&rec); err == io.EOF {
			return files, nil
		} else if err != nil {
			return nil, fmt.Errorf("gocorpus: %s: %w", path, err)
		}
		files = append(files, File{Path: rec.Path, Text: rec.Text})
	}
}
