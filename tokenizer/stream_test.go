package tokenizer

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// checkStream pushes ids into a DecodeStream in chunks of random sizes and checks that every
// piece is valid UTF-8 and that the pieces concatenate to Decode(ids).
func checkStream(t testing.TB, tok *Tokenizer, ids []int, skipSpecial bool, rng *rand.Rand) {
	t.Helper()
	want := tok.Decode(ids, skipSpecial)
	s := tok.NewDecodeStream(skipSpecial)
	var got strings.Builder
	for i := 0; i < len(ids); {
		n := 1
		if rng != nil {
			n = 1 + rng.IntN(3)
		}
		n = min(n, len(ids)-i)
		piece := s.Push(ids[i : i+n]...)
		require.True(t, utf8.ValidString(piece), "invalid UTF-8 piece %q", piece)
		got.WriteString(piece)
		i += n
	}
	tail := s.Flush()
	require.True(t, utf8.ValidString(tail), "invalid UTF-8 tail %q", tail)
	got.WriteString(tail)
	require.Equal(t, want, got.String(), "ids %v", ids)
	// The stream is reusable after Flush.
	require.Equal(t, want, s.Push(ids...)+s.Flush())
}

func TestDecodeStreamFixtureCases(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			for _, c := range f.Cases {
				for _, skip := range []bool{false, true} {
					checkStream(t, f.tok, c.IDs, skip, nil)
					checkStream(t, f.tok, c.IDsWithSpecial, skip, rng)
				}
			}
		})
	}
}

// TestDecodeStreamRandomIDs streams random id sequences, biased towards the tokens that make
// streaming hard: single bytes (partial UTF-8 sequences) and special tokens.
func TestDecodeStreamRandomIDs(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			bytesIDs := byteTokenIDs(f.tok)
			require.NotEmpty(t, bytesIDs)
			var specials []int
			for id := 0; id < f.tok.VocabSize(); id++ {
				if f.tok.IsSpecial(id) {
					specials = append(specials, id)
				}
			}
			for range 2000 {
				ids := make([]int, rng.IntN(30))
				for i := range ids {
					switch r := rng.IntN(10); {
					case r < 5:
						ids[i] = bytesIDs[rng.IntN(len(bytesIDs))]
					case r < 6 && len(specials) > 0:
						ids[i] = specials[rng.IntN(len(specials))]
					case r < 7:
						ids[i] = rng.IntN(f.tok.VocabSize()+10) - 5 // out-of-range ids are ignored
					default:
						ids[i] = rng.IntN(f.tok.VocabSize())
					}
				}
				checkStream(t, f.tok, ids, rng.IntN(2) == 0, rng)
			}
		})
	}
}

// byteTokenIDs returns the ids of tokens that stand for a single byte: "<0xXX>" tokens, and
// single byte-level characters.
func byteTokenIDs(tok *Tokenizer) []int {
	byteIDsMu.Lock()
	defer byteIDsMu.Unlock()
	if ids, ok := byteIDsCache[tok]; ok {
		return ids
	}
	var ids []int
	fallback := fallbackVocab()
	for b := 0; b < 256; b++ {
		for _, s := range []string{fallback[b], byteToString[b]} {
			if id, ok := tok.TokenToID(s); ok {
				ids = append(ids, id)
			}
		}
	}
	byteIDsCache[tok] = ids
	return ids
}

var (
	byteIDsMu    sync.Mutex
	byteIDsCache = map[*Tokenizer][]int{}
)

// TestDecodeStreamHoldsIncomplete checks on a tiny byte-level tokenizer that half a character
// is held back and released once complete.
func TestDecodeStreamHoldsIncomplete(t *testing.T) {
	tok := tinySpec{vocab: byteVocab(), decoder: map[string]any{"type": "ByteLevel"}}.build(t)
	s := tok.NewDecodeStream(false)
	smile := []byte("🙂")
	require.Equal(t, "a", s.Push(int('a')))
	require.Equal(t, "", s.Push(int(smile[0])))
	require.Equal(t, "", s.Push(int(smile[1]), int(smile[2])))
	require.Equal(t, "🙂", s.Push(int(smile[3])))
	require.Equal(t, "", s.Push(int(smile[0])))
	require.Equal(t, "\uFFFD", s.Flush())

	// Leading-space stripping (Strip after Fuse) happens once, at the start.
	vocab := append([]string{"▁a", "▁b", "▁"}, fallbackVocab()...)
	tok = tinySpec{vocab: vocab, decoder: map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"},
		map[string]any{"type": "Fuse"},
		map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
	}}}.build(t)
	s = tok.NewDecodeStream(false)
	require.Equal(t, "", s.Push(2)) // " ", the space that Strip removes
	require.Equal(t, " a", s.Push(0))
	require.Equal(t, " b", s.Push(1))
	// A byte-fallback run is held until a non-byte token shows it has ended.
	e := []byte("é")
	require.Equal(t, "", s.Push(3+int(e[0]), 3+int(e[1])))
	require.Equal(t, "é a", s.Push(0))
	require.Equal(t, "", s.Flush())
}
