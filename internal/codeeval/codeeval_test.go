package codeeval

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const source = `package demo

// Sum adds the numbers.
func Sum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}

// one is too short to prompt.
func one() int {
	return 1
}

func undocumented(a, b int) int {
	if a > b {
		return a
	}
	return b
}
`

func TestPrompts(t *testing.T) {
	ps := Prompts([]File{{Path: "demo.go", Data: []byte(source)}}, 10, PromptOptions{})
	require.Len(t, ps, 1)
	require.Equal(t, "Sum", ps[0].Name)
	require.Equal(t, "package demo\n\n// Sum adds the numbers.\nfunc Sum(xs []int) int {\n", ps[0].Text)
	require.Equal(t, "\ttotal := 0\n\tfor _, x := range xs {\n\t\ttotal += x\n\t}\n\treturn total\n}", ps[0].Body)
	v := Judge(ps[0].Text, ps[0].Body+"\n\n// Next starts another.\nfunc Next() {")
	require.Equal(t, Verdict{Closed: true, Body: ps[0].Body, Parses: true}, v, "the file's own body")
}

func TestJudge(t *testing.T) {
	prompt := "package p\n\nfunc f() string {\n"
	for _, c := range []struct {
		gen  string
		want Verdict
	}{
		{"\treturn \"}\"\n}\nmore", Verdict{Closed: true, Body: "\treturn \"}\"\n}", Parses: true}},
		{"\t// }\n\treturn `{`\n}", Verdict{Closed: true, Body: "\t// }\n\treturn `{`\n}", Parses: true}},
		{"\tif x {\n\t\treturn \"\"\n\t}\n\treturn \"a\"\n}", Verdict{Closed: true, Body: "\tif x {\n\t\treturn \"\"\n\t}\n\treturn \"a\"\n}", Parses: true}},
		{"\treturn = =\n}", Verdict{Closed: true, Body: "\treturn = =\n}", Parses: false}},
		{"\tfor {\n\t\tx++\n", Verdict{Body: "\tfor {\n\t\tx++\n"}},
	} {
		require.Equal(t, c.want, Judge(prompt, c.gen), "%q", c.gen)
	}
}

func TestAgreementAndTally(t *testing.T) {
	require.Equal(t, 2, Agreement([]int{1, 2, 3}, []int{1, 2, 4}, 32))
	require.Equal(t, 2, Agreement([]int{1, 2, 3}, []int{1, 2, 3}, 2))
	require.Equal(t, 0, Agreement(nil, []int{1}, 5))
	var tl Tally
	tl.Add(Verdict{Closed: true, Parses: true})
	tl.Add(Verdict{Closed: true})
	tl.Add(Verdict{})
	require.Equal(t, Tally{Prompts: 3, Closed: 2, Parsed: 1}, tl)
	require.InDelta(t, 0.5, tl.ParseRate(), 1e-12)
}
