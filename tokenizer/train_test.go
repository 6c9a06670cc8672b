package tokenizer

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func trainOn(t *testing.T, cfg TrainConfig, texts ...string) *TrainedBPE {
	t.Helper()
	b, err := Train(context.Background(), slices.Values(texts), cfg)
	require.NoError(t, err)
	return b
}

// mergeStrings returns the learned merges as pairs of raw strings.
func mergeStrings(b *TrainedBPE) [][2]string {
	out := make([][2]string, len(b.merges))
	for i, m := range b.merges {
		out[i] = [2]string{b.tokens[m[0]], b.tokens[m[1]]}
	}
	return out
}

func TestTrainHandComputed(t *testing.T) {
	// CodePattern cuts "ab ab ab ba" into "ab", " ab" (twice) and " ba". Pair counts:
	// (a,b) 3, (" ",a) 2, (" ",b) 1, (b,a) 1. The first merge is a+b; then " "+ab occurs
	// twice; the remaining pairs occur once, below the default MinPairCount of 2.
	text := "ab ab ab ba"
	b := trainOn(t, TrainConfig{}, text)
	assert.Equal(t, [][2]string{{"a", "b"}, {" ", "ab"}}, mergeStrings(b))
	assert.Equal(t, 256+2+4, b.VocabSize())

	// With MinPairCount 1, the tie between (" ",b) and (b,a) goes to the smaller pair of
	// ids (32, 98) before (98, 97); then " b"+"a" remains.
	b = trainOn(t, TrainConfig{MinPairCount: 1}, text)
	assert.Equal(t, [][2]string{{"a", "b"}, {" ", "ab"}, {" ", "b"}, {" b", "a"}}, mergeStrings(b))

	// The vocabulary size bounds the merges: 256 bytes + 1 merge + 4 special tokens.
	b = trainOn(t, TrainConfig{MinPairCount: 1, VocabSize: 261}, text)
	assert.Equal(t, [][2]string{{"a", "b"}}, mergeStrings(b))
	assert.Equal(t, 261, b.VocabSize())

	// A run of equal bytes merges left to right: "aaaa" has the pair (a,a) 3 times, which
	// gives "aa","aa", then (aa,aa) once.
	b = trainOn(t, TrainConfig{MinPairCount: 1}, "aaaa")
	assert.Equal(t, [][2]string{{"a", "a"}, {"aa", "aa"}}, mergeStrings(b))
	// "aaa": (a,a) twice, merged once at the left: "aa","a", then (aa,a).
	b = trainOn(t, TrainConfig{MinPairCount: 1}, "aaa")
	assert.Equal(t, [][2]string{{"a", "a"}, {"aa", "a"}}, mergeStrings(b))
}

func TestTrainedFilesLoad(t *testing.T) {
	b := trainOn(t, TrainConfig{MinPairCount: 1}, "ab ab ab ba")
	tj, cfgJSON, err := b.Files()
	require.NoError(t, err)

	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type   string         `json:"type"`
			Vocab  map[string]int `json:"vocab"`
			Merges [][2]string    `json:"merges"`
		} `json:"model"`
	}
	require.NoError(t, json.Unmarshal(tj, &f))
	assert.Equal(t, "BPE", f.Model.Type)
	assert.Equal(t, [][2]string{{"a", "b"}, {"Ġ", "ab"}, {"Ġ", "b"}, {"Ġb", "a"}}, f.Model.Merges)
	assert.Len(t, f.Model.Vocab, 260)
	assert.Equal(t, 256, f.Model.Vocab["ab"])
	assert.Equal(t, 32, f.Model.Vocab["Ġ"], "byte ids are the byte values")
	require.Len(t, f.AddedTokens, 4)
	for i, want := range []string{"<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>"} {
		assert.Equal(t, 260+i, f.AddedTokens[i].ID)
		assert.Equal(t, want, f.AddedTokens[i].Content)
		assert.True(t, f.AddedTokens[i].Special)
	}

	dir := t.TempDir()
	require.NoError(t, b.WriteDir(dir))
	tok, err := LoadDir(dir)
	require.NoError(t, err)
	assert.Equal(t, b.VocabSize(), tok.VocabSize())
	mask, ok := tok.TokenToID("<|mask|>")
	assert.True(t, ok)
	assert.Equal(t, tok.VocabSize()-1, mask, "mask is the last row")
	bos, ok := tok.BOSTokenID()
	assert.True(t, ok)
	eos, ok := tok.EOSTokenID()
	assert.True(t, ok)
	assert.Equal(t, []int{260, 261}, []int{bos, eos})
	cfg := tok.Config()
	assert.Equal(t, "<|pad|>", cfg.PadToken)
	assert.Equal(t, "<|mask|>", cfg.MaskToken)

	ids, err := tok.EncodeWith("ab ab ba", EncodeOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{256, 257, 259}, ids)
	ids, err = tok.Encode("ab")
	require.NoError(t, err)
	assert.Equal(t, []int{bos, 256}, ids, "Encode with special tokens puts BOS first")
	// Text that spells a special token stays text.
	ids, err = tok.EncodeWith("<|eos|>", EncodeOptions{})
	require.NoError(t, err)
	assert.NotContains(t, ids, eos)
	assert.Equal(t, "<|eos|>", tok.Decode(ids, false))

	_, err = FromBytes(tj, cfgJSON)
	require.NoError(t, err)
}

// naiveTrain is BPE training as its definition reads: count every pair anew, merge the
// most frequent one (ties to the smaller pair of ids) everywhere, repeat.
func naiveTrain(counts map[string]int64, vocab int, minCount int64) (tokens []string, merges [][2]int32) {
	type word struct {
		ids   []int32
		count int64
	}
	var words []word
	for w, n := range counts {
		ids := make([]int32, len(w))
		for i := range len(w) {
			ids[i] = int32(w[i])
		}
		words = append(words, word{ids, n})
	}
	for i := range 256 {
		tokens = append(tokens, string([]byte{byte(i)}))
	}
	merged := map[[2]int32]bool{}
	for len(tokens) < vocab {
		pairs := map[[2]int32]int64{}
		for _, w := range words {
			for i := 1; i < len(w.ids); i++ {
				pairs[[2]int32{w.ids[i-1], w.ids[i]}] += w.count
			}
		}
		var best [2]int32
		var bestN int64
		for p, n := range pairs {
			if n > bestN || (n == bestN && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN == 0 || bestN < minCount {
			break
		}
		text := tokens[best[0]] + tokens[best[1]]
		id := int32(slices.Index(tokens, text))
		if id < 0 {
			id = int32(len(tokens))
			tokens = append(tokens, text)
		}
		if !merged[best] {
			merged[best] = true
			merges = append(merges, best)
		}
		for wi := range words {
			var out []int32
			ids := words[wi].ids
			for i := 0; i < len(ids); i++ {
				if i+1 < len(ids) && ids[i] == best[0] && ids[i+1] == best[1] {
					out = append(out, id)
					i++
				} else {
					out = append(out, ids[i])
				}
			}
			words[wi].ids = out
		}
	}
	return tokens, merges
}

func TestLearnMergesMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		counts := map[string]int64{}
		alphabet := "ab c"[:2+trial%3]
		for range 1 + rng.IntN(60) {
			var sb strings.Builder
			for range 1 + rng.IntN(12) {
				sb.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
			counts[sb.String()] += 1 + int64(rng.IntN(5))
		}
		vocab := 256 + 1 + rng.IntN(100)
		minCount := int64(1 + trial%2)
		wantTokens, wantMerges := naiveTrain(counts, vocab, minCount)
		b := &TrainedBPE{tokens: slices.Clone(wantTokens[:256])}
		require.NoError(t, b.learnMerges(context.Background(), counts, vocab, minCount))
		require.Equal(t, wantTokens, b.tokens, "trial %d: %v", trial, counts)
		require.Equal(t, wantMerges, b.merges, "trial %d: %v", trial, counts)
	}
}

func TestTrainDeterministicAndRoundTrip(t *testing.T) {
	var texts []string
	for _, p := range []string{"tokenizer.go", "model_bpe.go", "regex.go", "train.go"} {
		texts = append(texts, readText(t, p))
	}
	cfg := TrainConfig{VocabSize: 1000}
	prev := runtime.GOMAXPROCS(1)
	one := trainOn(t, cfg, texts...)
	runtime.GOMAXPROCS(max(prev, 4))
	many := trainOn(t, cfg, texts...)
	runtime.GOMAXPROCS(prev)
	tj1, c1, err := one.Files()
	require.NoError(t, err)
	tj2, c2, err := many.Files()
	require.NoError(t, err)
	assert.Equal(t, tj1, tj2, "the result does not depend on the number of workers")
	assert.Equal(t, c1, c2)
	assert.Equal(t, 1000, one.VocabSize())

	tok, err := one.Tokenizer()
	require.NoError(t, err)
	for _, p := range []string{"decoders.go", "added.go", "chat.go"} {
		text := readText(t, p)
		ids, err := tok.EncodeWith(text, EncodeOptions{})
		require.NoError(t, err)
		assert.Equal(t, text, tok.Decode(ids, false), p)
		assert.Less(t, len(ids), len(text)/2, "%s: the merges compress Go source", p)
	}
	for _, s := range []string{"", "héllo wörld ✓ 日本語", "\x01\x7f\t\r\n  \n", "x := 1234567"} {
		ids, err := tok.EncodeWith(s, EncodeOptions{})
		require.NoError(t, err)
		assert.Equal(t, s, tok.Decode(ids, false))
	}
}

func TestTrainErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Train(ctx, slices.Values([]string{"x"}), TrainConfig{VocabSize: 259})
	assert.ErrorContains(t, err, "below 260")
	_, err = Train(ctx, slices.Values([]string{"x"}), TrainConfig{BOS: "<x>", EOS: "<x>"})
	assert.ErrorContains(t, err, "repeated")
	_, err = Train(ctx, slices.Values([]string{"ok", "bad \xff"}), TrainConfig{})
	assert.ErrorIs(t, err, ErrInvalidUTF8)
	_, err = Train(ctx, slices.Values([]string{"x"}), TrainConfig{Pattern: "(unclosed"})
	assert.ErrorContains(t, err, "regex")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Train(cancelled, slices.Values([]string{"x"}), TrainConfig{})
	assert.ErrorIs(t, err, context.Canceled)
}

func readText(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(data)
}

func TestCodePatternHasFastMatcher(t *testing.T) {
	m, err := compileRegex(CodePattern)
	require.NoError(t, err)
	assert.Equal(t, qwenMatcher{maxDigits: 3}, m, "CodePattern runs on the hand-written matcher")
}
