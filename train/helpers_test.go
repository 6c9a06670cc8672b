package train

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
)

// Byte-level vocabulary of the tests: the 256 bytes, then the special tokens, MASK last.
const (
	byteBOS   = 256
	byteEOS   = 257
	bytePad   = 258
	byteMask  = 259
	byteVocab = 260
)

// microConfig is the micro model the tests train: Llama-shaped, byte-level, tied.
func microConfig() model.Config {
	return model.Config{
		Architecture: model.ArchLlama, VocabSize: byteVocab, HiddenSize: 32, IntermediateSize: 64,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 1024,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeAttentionFactor: 1, TieWordEmbeddings: true,
		ScaleEmb: 1, DimModelBase: 32, BOSTokenID: byteBOS, EOSTokenIDs: []int{byteEOS}, MaskTokenID: byteMask,
	}
}

// microModel is a float32 micro model with random weights, closed when the test ends.
func microModel(t *testing.T, cfg model.Config, seed int64) *model.Model {
	t.Helper()
	m, err := model.NewRandom(testutil.Backend(t), cfg, dtypes.Float32, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// byteTokens encodes documents byte by byte, each as BOS, its bytes and EOS.
func byteTokens(docs ...[]byte) *Tokens {
	t := &Tokens{Vocab: byteVocab}
	for _, d := range docs {
		t.IDs = append(t.IDs, byteBOS)
		for _, c := range d {
			t.IDs = append(t.IDs, uint16(c))
		}
		t.IDs = append(t.IDs, byteEOS)
	}
	return t
}

// goSources reads the non-test Go files of a package of the toolchain's source, split
// into those named in heldOut and the others, skipping the test when they are absent.
func goSources(t *testing.T, pkg string, heldOut ...string) (train, held [][]byte) {
	t.Helper()
	root := os.Getenv("GOROOT")
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Skipf("no Go toolchain to read sources from: %v", err)
		}
		root = strings.TrimSpace(string(out))
	}
	files, err := filepath.Glob(filepath.Join(root, "src", pkg, "*.go"))
	if err != nil || len(files) == 0 {
		t.Skipf("the Go sources of %s are absent under %s", pkg, root)
	}
	slices.Sort(files)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		if slices.Contains(heldOut, filepath.Base(f)) {
			held = append(held, data)
		} else {
			train = append(train, data)
		}
	}
	if len(held) != len(heldOut) {
		t.Skipf("the held-out files %q of %s are absent under %s", heldOut, pkg, root)
	}
	return train, held
}
