package tokenizer

import (
	"encoding/json"
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

func parseAddedTokens(raw json.RawMessage, n normalizer) (*addedVocab, error) {
	av := &addedVocab{byID: map[int]*AddedToken{}, byContent: map[string]int{}, decodeAs: map[int]string{}}
	if !isNull(raw) {
		var list []struct {
			ID         *int   `json:"id"`
			Content    string `json:"content"`
			SingleWord bool   `json:"single_word"`
			LStrip     bool   `json:"lstrip"`
			RStrip     bool   `json:"rstrip"`
			Normalized *bool  `json:"normalized"`
			Special    bool   `json:"special"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
		for _, t := range list {
			if t.ID == nil || *t.ID < 0 {
				return nil, fmt.Errorf("added_tokens: token %q has no valid id", t.Content)
			}
			if t.Content == "" {
				continue
			}
			normalized := !t.Special
			if t.Normalized != nil {
				normalized = *t.Normalized
			}
			av.tokens = append(av.tokens, AddedToken{
				ID: *t.ID, Content: t.Content, SingleWord: t.SingleWord,
				LStrip: t.LStrip, RStrip: t.RStrip, Normalized: normalized, Special: t.Special,
			})
		}
	}
	av.raw, av.norm = newTokenTrie(), newTokenTrie()
	for i := range av.tokens {
		t := &av.tokens[i]
		av.byID[t.ID] = t
		av.byContent[t.Content] = t.ID
	}
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
				if pat, err = n.normalize(pat); err != nil {
					return nil, err
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

// tokenTrie finds, at a position of a text, the longest added token starting there.
type tokenTrie struct {
	first [256]bool // bytes that start some token
	root  *trieNode
}

type trieNode struct {
	next map[byte]*trieNode
	tok  *AddedToken
}

func newTokenTrie() *tokenTrie { return &tokenTrie{root: &trieNode{}} }

func (t *tokenTrie) empty() bool { return len(t.root.next) == 0 }

func (t *tokenTrie) add(s string, tok *AddedToken) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := t.root
	for i := 0; i < len(s); i++ {
		if n.next == nil {
			n.next = map[byte]*trieNode{}
		}
		c, ok := n.next[s[i]]
		if !ok {
			c = &trieNode{}
			n.next[s[i]] = c
		}
		n = c
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
	n := t.root
	for j := i; j < len(s); j++ {
		c, ok := n.next[s[j]]
		if !ok {
			break
		}
		n = c
		if n.tok != nil {
			best, end = n.tok, j+1
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
