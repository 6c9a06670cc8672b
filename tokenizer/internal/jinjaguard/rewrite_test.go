package jinjaguard

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"
)

// testData is the data the inline cases render with.
func testData() map[string]jinja.Value {
	msgs := []any{
		map[string]any{"role": "system", "content": "Be brief."},
		map[string]any{"role": "user", "content": "Hi <b>there</b>, 'friend'!\nSecond line."},
		map[string]any{"role": "assistant", "content": "<think>hmm</think>\n\nHello.", "tool_calls": []any{
			map[string]any{"function": map[string]any{"name": "f", "arguments": map[string]any{"x": 1, "y": []any{"a", 2.5}}}}}},
		map[string]any{"role": "user", "content": "ünïcödé 🙂 中文"},
	}
	data := map[string]any{
		"messages": msgs, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
		"tools": []any{map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}},
		"n":     3, "f": 2.5, "s": "a,b,,c", "empty": []any{}, "nested": map[string]any{"a": map[string]any{"b": []any{1, 2, 3}}},
		"json_text": `{"k": [1, 2, {"z": null}], "s": "x"}`,
	}
	vals := map[string]jinja.Value{}
	for k, v := range data {
		vals[k] = jinja.FromGoValue(v)
	}
	return vals
}

// renderOriginal renders src with the library alone.
func renderOriginal(src string, data map[string]jinja.Value) (string, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return "", err
	}
	return tmpl.RenderValues(maps.Clone(data))
}

// requireSameRender checks that the rewritten template renders what the original does, or
// fails where it fails.
func requireSameRender(t *testing.T, src string, data map[string]jinja.Value) {
	t.Helper()
	want, wantErr := renderOriginal(src, data)
	tmpl, err := Compile(src)
	if err != nil {
		require.Error(t, wantErr, "refused a template the library compiles: %v\n%s", err, src)
		return
	}
	got, gotErr := tmpl.Render(context.Background(), maps.Clone(data), Limits{})
	if wantErr != nil {
		require.Error(t, gotErr, "the library fails with %v\n%s", wantErr, src)
		return
	}
	require.NoError(t, gotErr, src)
	require.Equal(t, want, got, src)
}

var inlineTemplates = []string{
	// Text, whitespace control, comments, raw blocks.
	"plain text\n  with lines \n",
	"{{ bos_token }}\n  {%- if true -%}\n   x  \n  {%- endif %}\n  {% if true %}\n    y\n  {% endif %}\n z",
	"a {#- comment -#} b {# c #}\n{%+ if true +%}\n  k\n{% endif +%}\nend",
	"{% raw %}{{ not rendered }} {% if %}{% endraw %}{{ 'after' }}",
	"   {% if true %}x{% endif %}\n{% for i in [1] %}\n  {{ i }}\n{% endfor %}",
	"{{ }}|{{- ' trimmed ' -}}|",
	// Loops.
	"{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
	"{% for m in messages if m.role == 'user' %}{{ loop.index0 }}{{ m.content[:5] }}{% else %}none{% endfor %}",
	"{% for x in empty %}x{% else %}empty{% endfor %}",
	"{% for k, v in nested.a|items %}{{ k }}={{ v }}{% endfor %}{% for k in nested %}{{ k }}{% endfor %}",
	"{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
	"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
	"{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ loop.changed(i // 2) }}{{ loop.previtem }}{{ loop.nextitem }}{% endfor %}",
	"{% for x in [[1, [2, [3]]], 4] recursive %}<{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }}{% endif %}>{% endfor %}",
	"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
	"{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(0)|length }}{{ range(-3)|list }}",
	// Assignments.
	"{% set x = 1 %}{% set y, z = 2, 3 %}{{ x + y + z }}{% set t = 1, %}{{ t }}{% set e = () %}{{ e }}",
	"{% set ns = namespace(count=0, s='') %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.count }}{{ ns.s }}",
	"{% set block %}inside {{ n }}{% endset %}[{{ block }}]",
	"{% set d = {'a': 1, 'b': [1, 2]} %}{{ d }}{{ d.a }}{{ d['b'][1] }}{% set _ = d.update({'c': 3}) %}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('z', 'no') }}{{ d.pop('a') }}{{ d }}",
	"{% set l = [3, 1, 2] %}{% set _ = l.append(4) %}{{ l }}{{ l.pop() }}{{ l.pop(0) }}{% set _ = l.insert(0, 9) %}{{ l }}",
	// Macros and call blocks.
	"{% macro m(a, b='x', c=n + 1) %}({{ a }},{{ b }},{{ c }}|{{ varargs }}|{{ kwargs }}){% endmacro %}{{ m(1) }}{{ m(1, 2, 3, 4) }}{{ m(1, c=5) }}",
	"{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body {{ n }}{% endcall %}",
	"{% macro list_it(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list_it([1, 2]) %}<{{ x }}>{% endcall %}",
	"{% macro r(k) %}{% if k > 0 %}{{ k }}{{ r(k - 1) }}{% endif %}{% endmacro %}{{ r(5) }}",
	"{% macro kw(**kwargs) %}{{ kwargs }}{% endmacro %}{{ kw(a=1) }}",
	"{% macro m() %}M{% endmacro %}{% call m %}ignored{% endcall %}",
	// Filter blocks.
	"{% filter upper %}hello {{ n }}{% endfilter %}|{% filter replace('l', 'L')|trim %}  hello  {% endfilter %}",
	// Filters.
	"{{ messages|length }}{{ messages|first }}{{ (messages|last).role }}{{ s|length }}{{ s|count }}{{ s|reverse }}",
	"{{ ' x '|trim }}{{ 'aB'|lower }}{{ 'aB'|upper }}{{ 'hello world'|title }}{{ 'hELLO'|capitalize }}{{ 'a b c'|wordcount }}",
	"{{ s|replace(',', ';') }}{{ s|replace(',', ';', 1) }}{{ s|replace('', '-') }}{{ 123|replace('2', 'x') }}{{ s|replace(',', '!', count=2) }}",
	"{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('>', first=true, blank=true) }}",
	"{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [1, 2, 3]|batch(2, 'x')|list }}{{ 'abc'|batch(2)|list }}",
	"{{ [1, 2, 3]|join }}{{ [1, 2, 3]|join(', ') }}{{ messages|join('|', attribute='role') }}{{ 'abc'|join('-') }}{{ [1]|join(d='x') }}",
	"{{ tools|tojson }}{{ tools|tojson(indent=2) }}{{ nested|tojson(sort_keys=true) }}{{ 'é\n'|tojson }}{{ 'é'|tojson(ensure_ascii=true) }}{{ [1,2]|tojson(separators=[',', ':']) }}",
	"{{ json_text|fromjson }}{{ (json_text|from_json).k[2] }}",
	"{{ [3, 1, 2]|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ messages|sort(attribute='role')|map(attribute='role')|list }}",
	"{{ [1, 2, 2, 'a', 'A']|unique|list }}{{ [1, 2, 3]|max }}{{ ['b', 'a']|min }}{{ [1, 2.5]|sum }}{{ [1, 2]|sum(start=10) }}",
	"{{ messages|map(attribute='role')|list }}{{ ['a', 'b']|map('upper')|list }}{{ ['a,b']|map('replace', ',', ';')|list }}",
	"{{ messages|selectattr('role', 'eq', 'user')|map(attribute='content')|list }}{{ messages|rejectattr('role', 'equalto', 'user')|list|length }}",
	"{{ [0, 1, 2, 3]|select('odd')|list }}{{ [0, 1, 2]|reject|list }}{{ [1, 2]|select|list }}",
	"{{ nested.a|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}{{ nested|items|list }}",
	"{{ '3'|int }}{{ '3.7'|float }}{{ 'x'|int(7) }}{{ '0x1F'|int(base=16) }}{{ 2.567|round(2) }}{{ -3|abs }}{{ 2.5|round(method='floor') }}",
	"{{ missing|default('d') }}{{ none|d('n', true) }}{{ '<&>'|e }}{{ '<'|escape }}{{ n|string }}{{ n|safe }}",
	"{{ 'abc'|list }}{{ nested|list }}{{ 'ab'|first }}{{ 'ab'|last }}{{ 5|list }}",
	// Tests.
	"{{ n is defined }}{{ missing is undefined }}{{ none is none }}{{ n is integer }}{{ f is float }}{{ n is number }}{{ s is string }}",
	"{{ nested is mapping }}{{ empty is iterable }}{{ s is sequence }}{{ range is callable }}{{ true is true }}{{ n is odd }}{{ n is even }}",
	"{{ 6 is divisibleby 3 }}{{ 6 is divisibleby(4) }}{{ 'A' is upper }}{{ 'a' is lower }}{{ n is eq 3 }}{{ n is ne(3) }}{{ n is gt 1 }}{{ n is lt(1) }}",
	"{{ 'a' is in 'cat' }}{{ n is not none }}{{ m is not defined }}{{ n is sameas n }}{{ 1 is ge 1 }}{{ 1 is le 0 }}{{ n is not eq 2 }}",
	// Operators.
	"{{ 1 + 2 * 3 - 4 / 2 }}{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ -7 % 3 }}{{ 2 ** 10 }}{{ 2 ** -1 }}{{ 2 ** 3 ** 2 }}",
	"{{ 'a' ~ n ~ none }}{{ 'a' + 'b' }}{{ [1] + [2] }}{{ 'ab' * 3 }}{{ 3 * [0] }}{{ 'x' * -1 }}{{ 1.5 * 2 }}",
	"{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 'a' in 'abc' }}{{ 'z' not in ['a'] }}{{ [1, 2] < [1, 3] }}",
	"{{ true and 'x' }}{{ false or 'y' }}{{ not true }}{{ not not 1 }}{{ 'yes' if n > 2 else 'no' }}{{ 'only' if false }}",
	"{{ -n }}{{ +n }}{{ - -1 }}{{ -(-1) }}{{ -9223372036854775808 }}{{ -f|abs }}{{ -n|string }}",
	"{{ '%s-%d-%.2f' % ('a', 3, 2.5) }}{{ '%5s|%-5s|' % ('a', 'b') }}{{ '%d%%' % 50 }}{{ '%s' % [1, 2] }}",
	// Slices and subscripts.
	"{{ messages[0].role }}{{ messages[-1]['role'] }}{{ messages[1:3]|length }}{{ messages[::-1][0].role }}{{ s[::2] }}{{ s[1:-1] }}",
	"{{ 'abc'['a':] }}{{ [1, 2, 3]['x':] }}{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-2:] }}{{ nested.a.b.1 }}{{ s[10] }}",
	// String and dict methods.
	"{{ s.split(',') }}{{ ' a b '.split() }}{{ s.split(',', 1) }}{{ '  x '.strip() }}{{ 'xxaxx'.strip('x') }}{{ ' a'.lstrip() }}{{ 'a '.rstrip() }}",
	"{{ s.startswith('a') }}{{ s.endswith(('c', 'd')) }}{{ s.count(',') }}{{ s.find('b') }}{{ s.replace(',', '') }}{{ s.replace(',', '', 1) }}",
	"{{ 'x'.upper() }}{{ 'X'.lower() }}{{ 'a b'.title() }}{{ 'aB'.capitalize() }}{{ '{} and {}'.format(1, 2) }}{{ '{0}{1}{0}'.format('a', 'b') }}",
	"{% for m in messages %}{% if m.content is string and '</think>' in m.content %}{{ m.content.split('</think>')[-1].lstrip('\\n') }}{% endif %}{% endfor %}",
	// Globals.
	"{{ dict(a=1, b=2) }}{{ dict([['x', 1]]) }}{% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.current }}",
	"{{ raise_exception('boom') }}",
	"{{ undefined_function() }}", "{{ n() }}", "{{ messages.nope() }}",
	// Blocks.
	"{% generation %}gen {{ n }}{% endgeneration %}{% block b %}blk{% endblock %}",
	// Errors the library reports, which the rewrite must report too.
	"{% if %}", "{% for x in %}{% endfor %}", "{{ 1 + }}", "{% endif %}", "{% for i in range(3) %}", "{{ x|nosuchfilter }}",
	"{{ 'a' * 99999999 }}", "{% set a, b = 1 %}", "{% macro m %}{% endmacro %}", "{{ [1, 2]|batch }}", "{{ 1|items }}",
	// Odd forms the library accepts.
	"{{ [1 2 3] }}{{ {'a': 1 'b': 2} }}{{ f(1 2) if false }}{{ 'a' 'b' }}", "abc{% %}def{{ broken +* }}",
	"{% set x = a) or (b %}{{ x }}", "{{ n.real }}{{ messages.0.role }}{{ (1, 2).0 }}",
}

func TestRewriteKeepsOutput(t *testing.T) {
	data := testData()
	for _, src := range inlineTemplates {
		requireSameRender(t, src, data)
	}
}

// TestRewriteKeepsRealTemplates renders the chat templates of the fixtures, and those the
// Jinja library tests itself with (from its module, when present), with and without the
// rewrite.
func TestRewriteKeepsRealTemplates(t *testing.T) {
	type request struct {
		name string
		data map[string]jinja.Value
	}
	var requests []request
	templates := map[string]string{}
	for _, dir := range []string{"tokenizers/qwen3", "tokenizers/llama2"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "shared", "fixtures", dir, "tokenizer_config.json"))
		if err != nil {
			continue
		}
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		require.NoError(t, json.Unmarshal(data, &cfg))
		templates[dir] = cfg.ChatTemplate
	}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ardanlabs/jinja").Output(); err == nil {
		mod := strings.TrimSpace(string(out))
		files, _ := filepath.Glob(filepath.Join(mod, "testdata", "templates", "*.jinja"))
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			templates[filepath.Base(f)] = string(src)
		}
		files, _ = filepath.Glob(filepath.Join(mod, "testdata", "requests", "*.json"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			var req map[string]any
			require.NoError(t, json.Unmarshal(raw, &req))
			d := map[string]any{"messages": req["messages"], "tools": req["tools"], "add_generation_prompt": true,
				"bos_token": "<s>", "eos_token": "</s>", "enable_thinking": req["enable_thinking"], "reasoning_effort": "medium",
				"builtin_tools": []any{}, "date_string": "2024-01-01"}
			vals := map[string]jinja.Value{}
			for k, v := range d {
				vals[k] = jinja.FromGoValue(v)
			}
			requests = append(requests, request{filepath.Base(f), vals})
		}
	}
	requests = append(requests, request{"inline", testData()})
	if len(templates) == 0 {
		t.Skip("no chat templates found (fixtures or the jinja module)")
	}
	names := slices.Sorted(maps.Keys(templates))
	for _, name := range names {
		for _, req := range requests {
			t.Run(name+"/"+req.name, func(t *testing.T) {
				requireSameRender(t, templates[name], req.data)
			})
		}
	}
	t.Logf("%d templates x %d requests", len(templates), len(requests))
}
