package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each -env variant sets its own names and restores the starting value of the others'.
func TestEnvVariants(t *testing.T) {
	t.Setenv("BENCH_TEST_A", "start")
	os.Unsetenv("BENCH_TEST_B")
	variants, err := parseEnv("; BENCH_TEST_A=1 BENCH_TEST_B=2;BENCH_TEST_B=")
	require.NoError(t, err)
	require.Len(t, variants, 3)
	lookup := func(name string) string {
		v, ok := os.LookupEnv(name)
		if !ok {
			return "unset"
		}
		return v
	}
	for _, c := range []struct{ name, a, b string }{
		{"as started", "start", "unset"},
		{"BENCH_TEST_A=1 BENCH_TEST_B=2", "1", "2"},
		{"BENCH_TEST_B=", "start", ""},
		{"as started", "start", "unset"},
	} {
		v := variants[0]
		for _, w := range variants {
			if w.String() == c.name {
				v = w
			}
		}
		v.apply()
		require.Equal(t, c.name, v.String())
		require.Equal(t, c.a, lookup("BENCH_TEST_A"), c.name)
		require.Equal(t, c.b, lookup("BENCH_TEST_B"), c.name)
	}
	t.Cleanup(func() { os.Unsetenv("BENCH_TEST_B") })

	_, err = parseEnv("BENCH_TEST_A")
	require.ErrorContains(t, err, "not NAME=VALUE")
	variants, err = parseEnv("")
	require.NoError(t, err)
	require.Len(t, variants, 1)
}
