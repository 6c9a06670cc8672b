package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var fastMatcherSeeds = []string{
	"", "Hello world", "I'm sure they'll say we've done it, didn't they?", "IT'S 'LL 'Re 'ſ ſ",
	"  leading", "trailing  ", "a   b", "a \n\n  b", "\r\n\r\n", "x\n", " \t\n", "12345 678", "٣٤٥ ²½Ⅻ",
	"数字 12345 和 3.14159", "emoji 🤖🚀 and ZWJ 👩‍💻", "x = f(a[0], b->c) // comment", "(hello", " !!\n\n",
	"\u00a0nbsp\u00a0", "\u3000x", "'", "''s", "a'", "e\u0301 combining", "\v\f", "    return x\n",
}

// compareFastMatchers checks that each hand-written matcher finds exactly the matches that the
// general regex engine finds for its pattern.
func compareFastMatchers(t testing.TB, s string) {
	t.Helper()
	for _, expr := range []string{gpt2Pattern, qwen2Pattern, llama3Pattern} {
		fast, err := compileRegex(expr)
		require.NoError(t, err)
		slow, err := compileRegexp2(expr)
		require.NoError(t, err)
		require.Equal(t, matches(t, slow, s), matches(t, fast, s), "pattern %s on %q", expr, s)
	}
}

func matches(t testing.TB, m matcher, s string) [][2]int {
	var out [][2]int
	require.NoError(t, m.findAll(s, func(a, b int) error {
		out = append(out, [2]int{a, b})
		return nil
	}))
	return out
}

func TestFastMatchersAgreeWithRegex(t *testing.T) {
	for _, s := range fastMatcherSeeds {
		compareFastMatchers(t, s)
	}
	// Random strings over an alphabet of the characters the patterns care about.
	alphabet := []string{"a", "Z", "é", "ſ", "S", "s", "t", "r", "e", "v", "m", "l", "L", "d", "D", "'", "1", "٣", "²",
		" ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "!", ".", "🙂", "中", "\u0301", "_", "-", "\v"}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		var sb strings.Builder
		for n := rng.IntN(16); n > 0; n-- {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		compareFastMatchers(t, sb.String())
	}
}
