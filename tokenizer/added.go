package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token declared in the "added_tokens" list of tokenizer.json: a special
// token such as "<s>" or "<|im_end|>", or an extra ordinary token. Added tokens are found in
// the text before the model runs, so the model never splits them.
type AddedToken struct {
	ID      int    // token id
	Content string // the text of the token
	// SingleWord makes the token match only when it is not inside a word.
	SingleWord bool
	// LStrip and RStrip make the token swallow the whitespace on its left or right.
	LStrip, RStrip bool
	// Normalized tokens are matched in the normalized text rather than in the input.
	Normalized bool
	// Special tokens are control tokens: Decode can skip them, and Encode only recognises
	// them in text when asked to (see EncodeOptions.ParseSpecialTokens).
	Special bool
}

// addedVocab finds added tokens in text.
type addedVocab struct {
	tokens    []AddedToken // in file order
	byID      map[int]*AddedToken
	byContent map[string]int
	// decodeAs holds, for normalized tokens, the normalized content: decoding uses it, so
	// that a decoder which inverts the normalizer (ByteLevel, say) gets what it expects.
	decodeAs map[int]string
	raw      *tokenTrie // tokens matched in the input text
	norm     *tokenTrie // tokens matched in the normalized text
}

// segment is a stretch of input: either an added token (id >= 0) or text still to tokenize.
type segment struct {
	text    string
	id      int
	atStart bool
}

func parseAddedTokens(v any, n normalizer) (*addedVocab, error) {
	av := &addedVocab{byID: map[int]*AddedToken{}, byContent: map[string]int{}, decodeAs: map[int]string{}}
	var list []any
	if v != nil {
		var ok bool
		if list, ok = v.([]any); !ok {
			return nil, fmt.Errorf("added_tokens: want an array, got %s", jsonKind(v))
		}
	}
	for i, it := range list {
		o, err := asObject(it)
		if err == nil && o == nil {
			err = errors.New("want an object, got null")
		}
		if err != nil {
			return nil, fmt.Errorf("added_tokens: entry %d: %w", i, err)
		}
		t := AddedToken{}
		if t.Content, err = o.str("content", ""); err != nil {
			return nil, fmt.Errorf("added_tokens: entry %d: %w", i, err)
		}
		if o["id"] == nil {
			return nil, fmt.Errorf("added_tokens: token %q has no valid id", t.Content)
		}
		if t.ID, err = o.integer("id", -1); err != nil || t.ID < 0 || t.ID > maxTokenID {
			return nil, fmt.Errorf("added_tokens: token %q has no valid id (want an integer in [0, %d])", t.Content, maxTokenID)
		}
		for _, f := range []struct {
			key string
			dst *bool
		}{{"single_word", &t.SingleWord}, {"lstrip", &t.LStrip}, {"rstrip", &t.RStrip}, {"special", &t.Special}} {
			if *f.dst, err = o.boolean(f.key, false); err != nil {
				return nil, fmt.Errorf("added_tokens: token %q: %w", t.Content, err)
			}
		}
		if t.Normalized, err = o.boolean("normalized", !t.Special); err != nil {
			return nil, fmt.Errorf("added_tokens: token %q: %w", t.Content, err)
		}
		if t.Content == "" {
			continue
		}
		if len(t.Content) > maxAddedTokenBytes {
			return nil, fmt.Errorf("added_tokens: token %d has %d bytes of content, more than the %d allowed", t.ID, len(t.Content), maxAddedTokenBytes)
		}
		av.tokens = append(av.tokens, t)
	}
	av.raw, av.norm = newTokenTrie(), newTokenTrie()
	for i := range av.tokens {
		t := &av.tokens[i]
		av.byID[t.ID] = t
		av.byContent[t.Content] = t.ID
	}
	total := 0
	for _, t := range av.tokens {
		total += len(t.Content)
	}
	budget := newGrowthBudget(total)
	for i := range av.tokens {
		t := &av.tokens[i]
		if av.byID[t.ID] != t {
			continue // a later entry reused the id
		}
		if t.Normalized {
			// Normalized tokens are looked for in normalized text, in their normalized form.
			pat := t.Content
			if n != nil {
				var err error
				if pat, err = normalizeText(n, pat, budget); err != nil {
					return nil, fmt.Errorf("added_tokens: normalizing %q: %w", t.Content, err)
				}
				if len(pat) > maxNormalizedAddedTokenBytes {
					return nil, fmt.Errorf("added_tokens: token %d normalizes to %d bytes, more than the %d allowed", t.ID, len(pat), maxNormalizedAddedTokenBytes)
				}
			}
			av.norm.add(pat, t)
			if n != nil {
				av.decodeAs[t.ID] = pat
			}
		} else {
			av.raw.add(t.Content, t)
		}
	}
	return av, nil
}

// split cuts text at the added tokens of trie and appends the pieces to out. With
// skipSpecial, special tokens are not recognised (their text stays ordinary text).
func (av *addedVocab) split(text string, atStart bool, trie *tokenTrie, skipSpecial bool, out []segment) []segment {
	if trie.empty() {
		if text != "" {
			out = append(out, segment{text: text, id: -1, atStart: atStart})
		}
		return out
	}
	startOff := 0
	emitText := func(a, b int) {
		if a < b {
			out = append(out, segment{text: text[a:b], id: -1, atStart: atStart && a == 0})
		}
	}
	for i := 0; i < len(text); {
		tok, end := trie.longestAt(text, i)
		if tok == nil {
			i++
			continue
		}
		start, stop := i, end
		i = end
		if skipSpecial && tok.Special {
			continue
		}
		if tok.SingleWord {
			if (start > 0 && endsWithWordChar(text[:start])) || (stop < len(text) && startsWithWordChar(text[stop:])) {
				continue
			}
		}
		if tok.LStrip {
			start = max(len(strings.TrimRightFunc(text[:start], unicode.IsSpace)), startOff)
		}
		if tok.RStrip {
			stop = len(text) - len(strings.TrimLeftFunc(text[stop:], unicode.IsSpace))
			i = stop
		}
		emitText(startOff, start)
		out = append(out, segment{text: text[start:stop], id: tok.ID})
		startOff = stop
	}
	emitText(startOff, len(text))
	return out
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isRegexWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isRegexWordChar(r)
}

// isRegexWordChar is \w of Rust's regex crate: alphabetic, marks, decimal digits, connector
// punctuation and the join controls.
func isRegexWordChar(r rune) bool {
	if r < 0x80 {
		return r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	}
	return unicode.IsLetter(r) || unicode.In(r, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc, unicode.Join_Control)
}

// maxAddedTokenBytes bounds the content of an added token. Finding added tokens in a text
// costs up to this many steps per byte of text; real added tokens are a few dozen bytes.
const maxAddedTokenBytes = 256

// maxNormalizedAddedTokenBytes bounds the normalized form of an added token, which is what is
// looked for in normalized text (normalizers expand text a few times at most).
const maxNormalizedAddedTokenBytes = 4 * maxAddedTokenBytes

// tokenTrie finds, at a position of a text, the longest added token starting there. It is a
// radix tree: each edge holds a run of bytes (a substring of a token's content), so its size
// is proportional to the number of tokens, not to the bytes of their contents.
type tokenTrie struct {
	first [256]bool // bytes that start some token
	root  *trieNode
}

type trieNode struct {
	next map[byte]*trieEdge // keyed by the first byte of the edge's label
	tok  *AddedToken
}

type trieEdge struct {
	label string // non-empty
	node  *trieNode
}

func newTokenTrie() *tokenTrie { return &tokenTrie{root: &trieNode{}} }

func (t *tokenTrie) empty() bool { return len(t.root.next) == 0 }

// add inserts s; when s is already present, the token added first keeps it.
func (t *tokenTrie) add(s string, tok *AddedToken) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := t.root
	for s != "" {
		if n.next == nil {
			n.next = map[byte]*trieEdge{}
		}
		e := n.next[s[0]]
		if e == nil {
			n.next[s[0]] = &trieEdge{label: s, node: &trieNode{tok: tok}}
			return
		}
		k := 0
		for k < len(e.label) && k < len(s) && e.label[k] == s[k] {
			k++
		}
		if k < len(e.label) {
			// Split the edge where s leaves it.
			mid := &trieNode{next: map[byte]*trieEdge{e.label[k]: {label: e.label[k:], node: e.node}}}
			e.label, e.node = e.label[:k], mid
		}
		n, s = e.node, s[k:]
	}
	if n.tok == nil {
		n.tok = tok
	}
}

// longestAt returns the longest token that starts at s[i], and where it ends.
func (t *tokenTrie) longestAt(s string, i int) (*AddedToken, int) {
	if !t.first[s[i]] {
		return nil, 0
	}
	var best *AddedToken
	end := 0
	n, j := t.root, i
	for j < len(s) {
		e := n.next[s[j]]
		if e == nil || !strings.HasPrefix(s[j:], e.label) {
			break
		}
		n, j = e.node, j+len(e.label)
		if n.tok != nil {
			best, end = n.tok, j
		}
	}
	return best, end
}

// ContainsSpecialToken reports whether text spells one of the special tokens, so that
// untrusted text can be checked before it goes into a prompt whose special tokens are parsed
// (see EncodeChat).
func (t *Tokenizer) ContainsSpecialToken(text string) bool {
	for _, tok := range t.added.tokens {
		if tok.Special && strings.Contains(text, tok.Content) {
			return true
		}
	}
	return false
}
