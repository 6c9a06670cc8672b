package jinjaguard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"
)

// TestRangeMatchesTheLibrary compares the bounded range with the library's on arguments
// of every kind, near the ends of the integers too.
func TestRangeMatchesTheLibrary(t *testing.T) {
	args := []string{"0", "1", "3", "-2", "7", "2.9", "-1.5", "true", "false", "'4'", "'x'", "'-3z'", "none",
		"9223372036854775800", "9223372036854775807", "-9223372036854775807", "-9223372036854775808", "4611686018427387904"}
	r := newRender(context.Background(), Limits{}, nil)
	count := func(vals ...jinja.Value) (uint64, error) {
		v, err := r.rangeFn(vals, nil)
		if err != nil {
			return 0, err
		}
		return uint64(v.AsList().Len()), nil
	}
	value := func(s string) jinja.Value {
		v, err := evalConst(s)
		require.NoError(t, err, s)
		return v
	}
	checked := 0
	for _, a := range args {
		for _, b := range args {
			for _, c := range append([]string{""}, args...) {
				call := "range(" + a + ", " + b
				vals := []jinja.Value{value(a), value(b)}
				if c != "" {
					call += ", " + c
					vals = append(vals, value(c))
				}
				call += ")"
				n, err := count(vals...)
				if errors.Is(err, ErrLimit) {
					continue // far too long to build with the library
				}
				if n > 1000 {
					continue
				}
				requireSameRender(t, "{{ "+call+"|list }}", nil)
				checked++
			}
		}
	}
	require.Greater(t, checked, 200)
	requireSameRender(t, "{{ range() }}", nil)
	requireSameRender(t, "{{ range(1, 2, 3, 4) }}", nil)
}

// evalConst is the value of a literal as the library reads it.
func evalConst(s string) (jinja.Value, error) {
	switch {
	case s == "none":
		return jinja.None(), nil
	case s == "true" || s == "false":
		return jinja.NewBool(s == "true"), nil
	case strings.HasPrefix(s, "'"):
		return jinja.NewString(strings.Trim(s, "'")), nil
	case strings.Contains(s, "."):
		f, err := strconv.ParseFloat(s, 64)
		return jinja.NewFloat(f), err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return jinja.NewInt(n), err
}

func TestLimitsDefaults(t *testing.T) {
	require.Equal(t, DefaultLimits, Limits{}.withDefaults())
	l := Limits{MaxIterations: 5, Timeout: time.Second}.withDefaults()
	require.Equal(t, 5, l.MaxIterations)
	require.Equal(t, time.Second, l.Timeout)
	require.Equal(t, DefaultLimits.MaxDepth, l.MaxDepth)
}

// TestHooksReportLimits renders templates that each exceed one limit.
func TestHooksReportLimits(t *testing.T) {
	cases := []struct {
		src    string
		limits Limits
		want   string
	}{
		{"{% for i in range(10) %}{% endfor %}", Limits{MaxIterations: 5}, "MaxIterations"},
		{"{% for c in 'abcdefgh' %}{% endfor %}", Limits{MaxIterations: 5}, "a loop over 8 items"},
		{"{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(10) }}", Limits{MaxDepth: 5}, "MaxDepth"},
		{"{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(4) }}", Limits{MaxDepth: 5}, ""},
		{"{{ 'x' * 100 }}", Limits{MaxOutputBytes: 50}, "MaxOutputBytes"},
		{"{% for i in range(3) %}0123456789{% endfor %}", Limits{MaxOutputBytes: 25}, "MaxOutputBytes"},
		{"{% set x = 'x' * 100 %}", Limits{MaxValueBytes: 50}, "MaxValueBytes"},
		{"{% for i in range(10) %}{% set x = 'x' * 100 %}{% endfor %}", Limits{MaxWorkBytes: 1000}, "MaxWorkBytes"},
		{"{{ 'aa'|replace('a', 'b' * 100) }}", Limits{MaxValueBytes: 150}, "filter replace"},
		{"{{ 'aa'.replace('a', 'b' * 100) }}", Limits{MaxValueBytes: 150}, "method replace"},
		{"{{ '%100s' % 'a' }}", Limits{MaxValueBytes: 50}, "% format"},
		{"{{ [1, 2]|map('replace', '1', 'x' * 40)|list }}", Limits{MaxValueBytes: 50}, "MaxValueBytes"},
		{"{% set l = range(1000) %}{% for i in l %}{% for j in l %}{% for k in l %}{% endfor %}{% endfor %}{% endfor %}",
			Limits{MaxIterations: 1 << 40, Timeout: 50 * time.Millisecond}, "Timeout"},
		{"{% for i in range(100000000) %}{% endfor %}", Limits{MaxIterations: 1 << 40}, "MaxWorkBytes"},
	}
	for _, c := range cases {
		tmpl, err := Compile(c.src)
		require.NoError(t, err, c.src)
		_, err = tmpl.Render(context.Background(), nil, c.limits)
		if c.want == "" {
			require.NoError(t, err, c.src)
			continue
		}
		require.ErrorIs(t, err, ErrLimit, c.src)
		require.ErrorContains(t, err, c.want, c.src)
	}
	// A context that ends stops the render, with the context's error.
	tmpl, err := Compile("{% set l = range(1000) %}{% for i in l %}{% for j in l %}{% for k in l %}{% endfor %}{% endfor %}{% endfor %}")
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("user gave up"))
	_, err = tmpl.Render(ctx, nil, Limits{MaxIterations: 1 << 40})
	require.ErrorContains(t, err, "user gave up")
}

func TestLibraryErrorsAreShortened(t *testing.T) {
	tmpl, err := Compile("{{ raise_exception('x' * 100000) }}")
	require.NoError(t, err)
	_, err = tmpl.Render(context.Background(), nil, Limits{})
	require.Error(t, err)
	require.Less(t, len(err.Error()), maxErrorBytes+10)
	// A value that cannot be called is named in the error as the library names it.
	tmpl, err = Compile("{{ x.y() }}")
	require.NoError(t, err)
	_, err = tmpl.Render(context.Background(), map[string]jinja.Value{"x": jinja.FromGoValue(map[string]any{"y": 1})}, Limits{})
	require.EqualError(t, err, "x.y is not callable: 1")
}

func TestCompileRefusals(t *testing.T) {
	for src, want := range map[string]string{
		"{% break %}": "break outside a loop",
		"{% for i in x %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}": "continue outside a loop",
		"{% filter upper ~ 'x' %}{% endfilter %}":                                 "chain of filters",
		"{{ __bd_o }}":               "reserved",
		"{{ ('x' * 10000000)[1:] }}": "constant expression",
	} {
		_, err := Compile(src)
		require.ErrorIs(t, err, ErrTemplate, src)
		require.ErrorContains(t, err, want, src)
	}
}
