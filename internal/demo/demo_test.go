package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenizerRoundTrip(t *testing.T) {
	tok, err := Tokenizer()
	require.NoError(t, err)
	text := "Hello, wörld! 🌍"
	ids, err := tok.Encode(text)
	require.NoError(t, err)
	require.Equal(t, BOS, ids[0])
	require.Len(t, ids, 1+len(text))
	require.Equal(t, text, tok.Decode(ids, true))
}
