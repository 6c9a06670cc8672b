package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"
)

// chatTokenizer builds a small tokenizer whose chat template is src.
func chatTokenizer(t testing.TB, src string) *Tokenizer {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"chat_template": src, "bos_token": "<s>", "eos_token": "</s>"})
	require.NoError(t, err)
	tok, err := FromBytes(tinySpec{vocab: byteVocab(), pre: map[string]any{"type": "ByteLevel", "add_prefix_space": false},
		decoder: map[string]any{"type": "ByteLevel"}}.json(t), cfg)
	require.NoError(t, err)
	return tok
}

var chatMessages = []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi!"}}

// tuple is a template tuple of n ones.
func tuple(n int) string { return "(" + strings.Repeat("1, ", n) + ")" }

// formatDoubling makes '{0}'.format('{1}{1}', '{2}{2}', ...): each argument doubles the text.
func formatDoubling(n int) string {
	args := make([]string, n)
	for i := range args {
		args[i] = fmt.Sprintf("'{%d}{%d}'", i+1, i+1)
	}
	return "{{ '{0}'.format(" + strings.Join(args, ", ") + ")|length }}"
}

// hostileChatCases are chat templates that, rendered by the template engine alone, crash
// the process (out of memory, stack overflow), never end, or do work out of all proportion
// to their size. Each must end with a clean error naming what it exceeded.
var hostileChatCases = []struct {
	name, src, want string
	limits          ChatLimits
	fatal           bool // kills the process without the guard
}{
	{name: "range of a billion", src: "{{ range(10**9)|length }}", want: "MaxIterations", fatal: true},
	{name: "60 MB string a thousand times", src: "{% for i in range(1000) %}{{ 'x' * 60000000 }}{% endfor %}", want: "MaxValueBytes"},
	{name: "string grown in a loop", src: "{% set ns = namespace(s='') %}{% for i in range(1000) %}{% set ns.s = ns.s ~ ('x' * 10000000) %}{% endfor %}{{ ns.s|length }}", want: "MaxValueBytes"},
	{name: "self-recursive macro", src: "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", want: "MaxDepth", fatal: true},
	{name: "mutually recursive macros", src: "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(1) }}", want: "MaxDepth"},
	{name: "recursive loop", src: "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", want: "MaxDepth", fatal: true},
	{name: "caller recursion", src: "{% macro m() %}{% call m() %}{% endcall %}{% endmacro %}{{ m() }}", want: "MaxDepth"},
	{name: "nested ranges", src: "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", want: "MaxIterations"},
	{name: "loop over a long string", src: "{% for c in 'x' * 5000000 %}{% endfor %}", want: "MaxIterations"},
	{name: "output of a long loop", src: "{% for i in range(1000000) %}" + strings.Repeat("text ", 20) + "{% endfor %}", want: "MaxOutputBytes"},
	{name: "list doubled in a loop", src: "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a|tojson|length }}", want: "MaxValueBytes"},
	{name: "list doubled by append", src: "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set n = [] %}{% set _ = n.append(ns.a) %}{% set _ = n.append(ns.a) %}{% set ns.a = n %}{% endfor %}{{ ns.a|string|length }}", want: "MaxValueBytes"},
	{name: "cyclic lists compared", src: "{% set a = [] %}{% set b = [] %}{% set _ = a.append(a) %}{% set _ = b.append(b) %}{{ a == b }}", want: "contains itself", fatal: true},
	{name: "cyclic list in unique", src: "{% set a = [] %}{% set _ = a.append(a) %}{% set _ = a.append([a]) %}{{ a|unique|list }}", want: "contains itself"},
	{name: "deep list by append", src: "{% set top = [] %}{% set ns = namespace(c=top) %}{% for i in range(200000) %}{% set n = [] %}{% set _ = ns.c.append(n) %}{% set ns.c = n %}{% endfor %}{{ top }}", want: "nested deeper"},
	{name: "replace filter", src: "{{ ('x' * 1000000)|replace('x', 'y' * 1000) }}", want: "MaxValueBytes"},
	{name: "replace method", src: "{{ ('x' * 1000000).replace('x', 'y' * 1000) }}", want: "MaxValueBytes"},
	{name: "replace with empty pattern", src: "{{ ('x' * 1000000)|replace('', 'y' * 100) }}", want: "MaxValueBytes"},
	{name: "indent width", src: "{{ 'a\\nb'|indent(10**9) }}", want: "MaxValueBytes"},
	{name: "batch fill", src: "{{ [1]|batch(10**9, 0)|list }}", want: "MaxValueBytes"},
	{name: "join separator", src: "{{ range(1000000)|join('x' * 1000) }}", want: "MaxValueBytes"},
	{name: "tojson indent", src: "{{ range(10000)|tojson(indent=100000) }}", want: "MaxValueBytes"},
	{name: "map replace", src: "{{ ['x' * 100000]|map('replace', 'x', 'y' * 1000)|list }}", want: "MaxValueBytes"},
	{name: "format doubling", src: formatDoubling(40), want: "MaxValueBytes"},
	{name: "percent widths", src: "{{ ('%999999d' * 200) % " + tuple(200) + " }}", want: "MaxValueBytes"},
	{name: "percent arguments", src: "{% set t = range(300000)|list %}{{ ('%s' * 3) % (t, t, t) }}", want: "MaxValueBytes"},
	{name: "dict of a long string", src: "{{ dict('ab' * 3000000) }}", want: "MaxIterations"},
	{name: "recursive loop over a long string", src: "{% for x in ['a'] recursive %}{{ loop('ab' * 3000000) }}{% endfor %}", want: "MaxIterations"},
	{name: "percent star width", src: "{{ '%*d' % (100000000, 1) }}", want: "width from the arguments"},
	{name: "fromjson deep", src: "{{ ('[' * 5000000 ~ ']' * 5000000)|fromjson }}", want: "fromjson"},
	{name: "unique quadratic", src: "{{ range(200000)|unique|list|length }}", want: "unique"},
	{name: "call block output", src: "{% for i in range(1000) %}{% call range(1000000) %}{% endcall %}{% endfor %}", want: "MaxOutputBytes"},
	{name: "filter block", src: "{% for i in range(100) %}{% filter replace('a', 'b' * 100000) %}{{ 'a' * 1000 }}{% endfilter %}{% endfor %}", want: "MaxValueBytes"},
	{name: "value of a huge message", src: "{{ messages|tojson }}", want: "MaxValueBytes", limits: ChatLimits{MaxValueBytes: 10}},
	{name: "quadratic inserts", src: "{% set l = [] %}{% for i in range(1000000) %}{% set _ = l.insert(0, i) %}{% endfor %}",
		want: "Timeout", limits: ChatLimits{Timeout: 300 * time.Millisecond, MaxIterations: 1 << 40}},
	{name: "work of created values", src: "{% for i in range(100000) %}{% set s = 'x' * 100000 %}{% endfor %}", want: "MaxWorkBytes"},
	{name: "break escaping a macro", src: "{% macro m() %}{% break %}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}", want: "break outside a loop"},
	{name: "nested parentheses", src: "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", want: "nests deeper", fatal: true},
	{name: "nested statements", src: strings.Repeat("{% if true %}", 5000) + strings.Repeat("{% endif %}", 5000), want: "nest deeper"},
	{name: "long chain", src: "{{ 1" + strings.Repeat(" ~ 1", 100000) + " }}", want: "nests deeper"},
	{name: "template too large", src: strings.Repeat("x", 2<<20), want: "bytes, more than"},
	{name: "quadratic raw block", src: "{% raw %}" + strings.Repeat("{%", 200000) + "{% endraw %}", want: "raw block"},
	{name: "adjacent tags", src: strings.Repeat("{% if true %}{% endif %}", 20000), want: "adjacent tags"},
	{name: "reserved name", src: "{% macro __bd_tick(a, b) %}{% endmacro %}", want: "reserved"},
}

func TestHostileChatTemplates(t *testing.T) {
	if !childLimitsSupported || raceEnabled {
		t.Skip("needs a child process with an address-space limit (Linux, without the race detector)")
	}
	for i, c := range hostileChatCases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runChild(t, "TestHostileChatChild", "TOKENIZER_HOSTILE_CASE="+strconv.Itoa(i))
			require.NoError(t, err, "the child crashed or hung:\n%s", head(out))
			require.Contains(t, out, "HOSTILE-RESULT limit=true", head(out))
			require.Contains(t, out, c.want, head(out))
		})
	}
}

// TestHostileChatTemplatesKillUnguarded shows that the cases marked fatal do kill a
// process that renders them with the template engine alone: the child dies instead of
// printing a result.
func TestHostileChatTemplatesKillUnguarded(t *testing.T) {
	if !childLimitsSupported || raceEnabled {
		t.Skip("needs a child process with an address-space limit (Linux, without the race detector)")
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	for i, c := range hostileChatCases {
		if !c.fatal {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			out, err := runChild(t, "TestHostileChatChild", "TOKENIZER_HOSTILE_CASE="+strconv.Itoa(i), "TOKENIZER_HOSTILE_UNGUARDED=1")
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the unguarded engine survived:\n%s", head(out))
			require.NotContains(t, out, "HOSTILE-RESULT", head(out))
			// Out of address space the runtime dies with a fatal error or, in the middle of
			// a collection, a segmentation fault.
			require.True(t, strings.Contains(out, "fatal error") || strings.Contains(out, "SIGSEGV"), head(out))
		})
	}
}

// runChild runs test name of this test binary in a child process with env set, and
// returns its output. The child has a minute.
func runChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// head shortens the output of a child for a failure message.
func head(out string) string {
	if len(out) > 2000 {
		return out[:2000] + "..."
	}
	return out
}

// TestHostileChatChild renders one hostile case; it runs only as a child of the tests
// above, with 2 GiB of address space and a 256 MB stack (1 GiB and 64 MB unguarded).
func TestHostileChatChild(t *testing.T) {
	env := os.Getenv("TOKENIZER_HOSTILE_CASE")
	if env == "" {
		t.Skip("runs as a child of TestHostileChatTemplates")
	}
	i, err := strconv.Atoi(env)
	require.NoError(t, err)
	c := hostileChatCases[i]
	if os.Getenv("TOKENIZER_HOSTILE_UNGUARDED") != "" {
		// Smaller bounds only make the unguarded engine die sooner.
		require.NoError(t, limitChild(1<<30, 64<<20))
		tmpl, err := jinja.Compile(c.src)
		if err == nil {
			_, err = tmpl.Render(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi!"}}})
		}
		fmt.Printf("HOSTILE-RESULT unguarded err=%v\n", err)
		return
	}
	require.NoError(t, limitChild(2<<30, 256<<20))
	cfg, err := json.Marshal(map[string]any{"chat_template": c.src})
	require.NoError(t, err)
	tok, err := FromBytes(tinySpec{vocab: byteVocab()}.json(t), cfg)
	require.NoError(t, err)
	_, err = tok.ApplyChatTemplate(chatMessages, ChatOptions{Limits: c.limits})
	limit := errors.Is(err, ErrChatLimit) || errors.Is(err, ErrChatTemplateRefused)
	fmt.Printf("HOSTILE-RESULT limit=%v err=%v\n", limit, err)
}

func TestChatRenderStopsWithTheContext(t *testing.T) {
	tok := chatTokenizer(t, "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}")
	limits := ChatLimits{MaxIterations: 1 << 50}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := tok.ApplyChatTemplateContext(ctx, chatMessages, ChatOptions{Limits: limits})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	_, err = tok.EncodeChatContext(ctx, chatMessages, ChatOptions{Limits: limits})
	require.ErrorIs(t, err, context.Canceled)
	// An ended context stops a render before it starts.
	_, err = tok.ApplyChatTemplateContext(ctx, chatMessages, ChatOptions{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestChatLimitsAreConfigurable(t *testing.T) {
	tok := chatTokenizer(t, "{% for m in messages %}{{ m.content }}{% endfor %}{% for i in range(n) %}.{% endfor %}")
	vars := map[string]any{"n": 50}
	out, err := tok.ApplyChatTemplate(chatMessages, ChatOptions{Vars: vars})
	require.NoError(t, err)
	require.Equal(t, "Be brief.Hi!"+strings.Repeat(".", 50), out)
	for _, c := range []struct {
		limits ChatLimits
		want   string
	}{
		{ChatLimits{MaxIterations: 40}, "MaxIterations"},
		{ChatLimits{MaxOutputBytes: 30}, "MaxOutputBytes"},
		{ChatLimits{MaxValueBytes: 5}, "MaxValueBytes"},
	} {
		_, err := tok.ApplyChatTemplate(chatMessages, ChatOptions{Vars: vars, Limits: c.limits})
		require.ErrorIs(t, err, ErrChatLimit, c.want)
		require.ErrorContains(t, err, c.want)
	}
	// Limits that are not reached change nothing.
	out2, err := tok.ApplyChatTemplate(chatMessages, ChatOptions{Vars: vars, Limits: ChatLimits{MaxIterations: 52, MaxDepth: 1, MaxOutputBytes: 62}})
	require.NoError(t, err)
	require.Equal(t, out, out2)
}
