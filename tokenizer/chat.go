package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/blockdiff/blockdiff/tokenizer/internal/jinjaguard"
)

// ErrNoChatTemplate is returned when a chat template is requested but the tokenizer has none.
var ErrNoChatTemplate = errors.New("tokenizer: no chat template")

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant", "tool", ...
	Content string
	// Extra holds further fields that some templates read, such as "tool_calls" or
	// "reasoning_content". Values may be nil, bool, int, int64, float64, string,
	// json.Number, []any or map[string]any. An Extra key named "role" or "content"
	// replaces the field above.
	Extra map[string]any
}

// ErrChatLimit is wrapped by the error of a chat template render that exceeded one of its
// ChatLimits.
var ErrChatLimit = jinjaguard.ErrLimit

// ErrChatTemplateRefused is wrapped by the error for a chat template refused before it
// runs: one larger than 1 MiB, nested more than 200 levels deep, with break outside a
// loop, or with a shape that would make the template engine's parser do quadratic work.
var ErrChatTemplateRefused = jinjaguard.ErrTemplate

// ChatLimits bounds the work of rendering a chat template. The template comes from the
// model folder and is untrusted: without bounds, a loop over range(10**9), a
// self-recursive macro or a string doubled in a loop would exhaust the memory or the
// stack of the process, or never end. A zero field takes its default; each breach fails
// the render with an error wrapping ErrChatLimit that names the field.
type ChatLimits struct {
	// MaxIterations bounds the loop iterations plus macro calls (default 1,000,000), and
	// the length of a list made by range.
	MaxIterations int
	// MaxDepth bounds the nesting of macro calls and of recursive loops (default 100).
	MaxDepth int
	// MaxOutputBytes bounds the rendered prompt, counting what macros write before it is
	// used (default 16 MiB).
	MaxOutputBytes int
	// MaxValueBytes bounds any one value the template handles, measured as the text it
	// prints as (default 16 MiB). Messages count too: one larger than this cannot be
	// rendered.
	MaxValueBytes int
	// MaxWorkBytes bounds the bytes of all the values the template creates (default 1 GiB).
	MaxWorkBytes int
	// Timeout bounds the wall time of the render (default 10 s); the context's deadline
	// applies as well.
	Timeout time.Duration
}

// ChatOptions controls ApplyChatTemplate.
type ChatOptions struct {
	// AddGenerationPrompt appends the text that opens the assistant's turn.
	AddGenerationPrompt bool
	// Template selects a named template; "" means the default one.
	Template string
	// Vars are extra template variables, such as "tools" or "enable_thinking", with the same
	// value types as Message.Extra. They override the defaults (tools and documents are
	// None, the special tokens are strings).
	Vars map[string]any
	// Limits bounds the render (zero fields take their defaults).
	Limits ChatLimits
}

// chatTemplates compiles each template once, on first use.
type chatTemplates struct {
	mu       sync.Mutex
	compiled map[string]*jinjaguard.Template
}

// ApplyChatTemplate renders messages with the Jinja chat template from tokenizer_config.json,
// as transformers' apply_chat_template(tokenize=False) does: the template sees messages,
// add_generation_prompt, tools and documents (None unless given in Vars), the special tokens
// (bos_token, eos_token, unk_token, pad_token, ... and additional_special_tokens) and
// raise_exception / strftime_now. It fails with ErrNoChatTemplate when the tokenizer has
// no template. The template is untrusted: it renders under opts.Limits (see ChatLimits).
func (t *Tokenizer) ApplyChatTemplate(messages []Message, opts ChatOptions) (string, error) {
	return t.ApplyChatTemplateContext(context.Background(), messages, opts)
}

// ApplyChatTemplateContext is ApplyChatTemplate that stops when ctx ends, with an error
// wrapping the context's error.
func (t *Tokenizer) ApplyChatTemplateContext(ctx context.Context, messages []Message, opts ChatOptions) (string, error) {
	tmpl, err := t.chatTemplate(opts.Template)
	if err != nil {
		return "", err
	}
	data := t.chatData(messages, opts)
	l := opts.Limits
	out, err := tmpl.Render(ctx, data, jinjaguard.Limits{
		MaxIterations: l.MaxIterations, MaxDepth: l.MaxDepth, MaxOutputBytes: l.MaxOutputBytes,
		MaxValueBytes: l.MaxValueBytes, MaxWorkBytes: l.MaxWorkBytes, Timeout: l.Timeout,
	})
	if err != nil {
		return "", fmt.Errorf("tokenizer: rendering chat template: %w", err)
	}
	return out, nil
}

// chatData is the data a chat template renders with.
func (t *Tokenizer) chatData(messages []Message, opts ChatOptions) map[string]jinja.Value {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		d := jinja.NewDict()
		dict := d.AsDict()
		dict.Set("role", jinja.NewString(m.Role))
		dict.Set("content", jinja.NewString(m.Content))
		keys := make([]string, 0, len(m.Extra))
		for k := range m.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			dict.Set(k, jinja.FromGoValue(m.Extra[k]))
		}
		msgs[i] = d
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
	}
	for k, v := range t.config.specialTokenVars() {
		data[k] = jinja.FromGoValue(v)
	}
	for k, v := range opts.Vars {
		data[k] = jinja.FromGoValue(v)
	}
	return data
}

// EncodeChat renders messages with ApplyChatTemplate and encodes the result as transformers'
// apply_chat_template(tokenize=True) does: the special tokens the template wrote are real, so
// they are parsed (ParseSpecialTokens), and no post-processor tokens are added, since the
// template itself writes BOS where the model wants it.
//
// Caution: message contents are rendered into the prompt verbatim, so special-token text
// inside a content ("<|im_end|>" typed by a user) is parsed as well, exactly as in
// transformers. To keep untrusted text from injecting control tokens, check it first (for
// example with ContainsSpecialToken) or encode the prompt pieces yourself.
func (t *Tokenizer) EncodeChat(messages []Message, opts ChatOptions) ([]int, error) {
	return t.EncodeChatContext(context.Background(), messages, opts)
}

// EncodeChatContext is EncodeChat that stops when ctx ends, with an error wrapping the
// context's error.
func (t *Tokenizer) EncodeChatContext(ctx context.Context, messages []Message, opts ChatOptions) ([]int, error) {
	prompt, err := t.ApplyChatTemplateContext(ctx, messages, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer: encoding chat: %w", err)
	}
	return t.EncodeWith(prompt, EncodeOptions{ParseSpecialTokens: true})
}

// HasChatTemplate reports whether the tokenizer has a default chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.config.ChatTemplate != "" }

func (t *Tokenizer) chatTemplate(name string) (*jinjaguard.Template, error) {
	src := t.config.ChatTemplate
	key := "default"
	if name != "" {
		var ok bool
		if src, ok = t.config.ChatTemplates[name]; !ok {
			return nil, fmt.Errorf("%w named %q (have %v)", ErrNoChatTemplate, name, t.config.templateNames())
		}
		key = name
	}
	if src == "" {
		return nil, ErrNoChatTemplate
	}
	t.templates.mu.Lock()
	defer t.templates.mu.Unlock()
	if tmpl, ok := t.templates.compiled[key]; ok {
		return tmpl, nil
	}
	tmpl, err := jinjaguard.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: compiling chat template: %w", err)
	}
	if t.templates.compiled == nil {
		t.templates.compiled = map[string]*jinjaguard.Template{}
	}
	t.templates.compiled[key] = tmpl
	return tmpl, nil
}
