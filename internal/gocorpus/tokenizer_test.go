package gocorpus

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/tokenizer"
)

// TestTokenizerRoundTripHeldOut trains a tokenizer on a slice of the train split (every
// tenth file, to keep the test short) and checks that every held-out file decodes back to
// itself exactly. The command cmd/gocorpus runs the same check with the full tokenizer.
func TestTokenizerRoundTripHeldOut(t *testing.T) {
	c := loadToolchain(t)
	slice := func(yield func(string) bool) {
		for i, f := range c.Split(Train) {
			if i%10 == 0 && !yield(f.Text) {
				return
			}
		}
	}
	b, err := tokenizer.Train(context.Background(), slice, tokenizer.TrainConfig{VocabSize: 2048})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, b.WriteDir(dir))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	require.Equal(t, 2048, tok.VocabSize())

	files := c.Split(HeldOut)
	require.NotEmpty(t, files)
	var nbytes, ntokens int
	for _, f := range files {
		ids, err := tok.EncodeWith(f.Text, tokenizer.EncodeOptions{})
		require.NoError(t, err, f.Path)
		if got := tok.Decode(ids, false); got != f.Text {
			t.Errorf("%s: the round trip differs", f.Path)
		}
		nbytes += len(f.Text)
		ntokens += len(ids)
	}
	t.Logf("%d held-out files, %d bytes, %d tokens: %.3f tokens per byte", len(files), nbytes, ntokens, float64(ntokens)/float64(nbytes))
	assert.Less(t, float64(ntokens)/float64(nbytes), 0.5, "a 2048-token vocabulary compresses Go source")
}

// BenchmarkTrainTokenizer trains the default 8192-id tokenizer on the whole train split.
func BenchmarkTrainTokenizer(b *testing.B) {
	c, err := toolchainCorpus()
	if errors.Is(err, ErrNoToolchain) {
		b.Skipf("skipping: %v", err)
	}
	require.NoError(b, err)
	var n int64
	for _, f := range c.Split(Train) {
		n += int64(len(f.Text))
	}
	b.SetBytes(n)
	for b.Loop() {
		if _, err := tokenizer.Train(context.Background(), c.Texts(Train), tokenizer.TrainConfig{}); err != nil {
			b.Fatal(err)
		}
	}
}
