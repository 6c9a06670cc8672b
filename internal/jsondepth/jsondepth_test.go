package jsondepth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScan(t *testing.T) {
	for _, c := range []struct {
		text            string
		limit           int
		deepest, beyond int
	}{
		{`1`, 0, 0, -1},
		{`{"a": [1, {"b": []}]}`, 4, 4, -1},
		{`{"a": [1, {"b": []}]}`, 3, 4, 16},
		{`["[[[[", "\"[[["]`, 1, 1, -1}, // brackets and escaped quotes inside strings
		{strings.Repeat("[", 10) + strings.Repeat("]", 10), 9, 10, 9},
	} {
		deepest, beyond := Scan(c.text, c.limit)
		require.Equal(t, c.deepest, deepest, "%s", c.text)
		require.Equal(t, c.beyond, beyond, "%s", c.text)
		deepest, beyond = Scan([]byte(c.text), c.limit)
		require.Equal(t, c.deepest, deepest, "%s as bytes", c.text)
		require.Equal(t, c.beyond, beyond, "%s as bytes", c.text)
	}
}
