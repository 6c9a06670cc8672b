package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// matcher finds the non-overlapping matches of a pattern in a string, left to right, and
// reports each one as a byte range. It stops at, and returns, the first error fn returns.
type matcher interface {
	findAll(s string, fn func(start, end int) error) error
}

// literalMatcher matches a fixed string. An empty literal never matches.
type literalMatcher string

func (m literalMatcher) findAll(s string, fn func(start, end int) error) error {
	lit := string(m)
	if lit == "" {
		return nil
	}
	for off := 0; off <= len(s); {
		i := strings.Index(s[off:], lit)
		if i < 0 {
			return nil
		}
		start := off + i
		if err := fn(start, start+len(lit)); err != nil {
			return err
		}
		off = start + len(lit)
	}
	return nil
}

// charMatcher matches every single character for which pred holds.
type charMatcher func(rune) bool

func (m charMatcher) findAll(s string, fn func(start, end int) error) error {
	for i, r := range s {
		if m(r) {
			if err := fn(i, i+utf8.RuneLen(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrRegexBudget is wrapped by the error of a tokenizer.json regex that took too long to
// find its next match, which is what a pattern with catastrophic backtracking such as
// (a+)+$ does on a text made to trigger it. The message names the pattern.
var ErrRegexBudget = errors.New("tokenizer: regex match budget exceeded")

// The time one search for the next match may take is regexBaseTimeout, or
// regexTimeoutPerRune for each character of the text searched when that is more, so that a
// pattern that scans far for its next match in a long text still has time to do so honestly.
// Variables so that tests can shorten them.
var (
	regexBaseTimeout    = time.Second
	regexTimeoutPerRune = 200 * time.Nanosecond
)

// maxRegexTiers bounds the number of timeout tiers (the longest allowance is
// regexBaseTimeout << (maxRegexTiers-1)).
const maxRegexTiers = 16

// regexMatcher runs a general regular expression with the .NET-compatible regexp2 engine,
// which supports the look-around that Hugging Face patterns (written for Oniguruma) use.
// The engine's timeout is fixed per compiled expression, so the matcher keeps one compiled
// copy per timeout tier, each allowing twice the time of the one before, and searches a
// text with the first tier whose allowance covers the text's length.
type regexMatcher struct {
	expr  string
	tiers [maxRegexTiers]atomic.Pointer[regexp2.Regexp]
}

// regex returns the compiled copy for a text of n characters and its timeout.
func (m *regexMatcher) regex(n int) (*regexp2.Regexp, time.Duration, error) {
	base := regexBaseTimeout
	want := time.Duration(n) * regexTimeoutPerRune
	tier := 0
	for tier < maxRegexTiers-1 && base<<tier < want {
		tier++
	}
	timeout := base << tier
	if re := m.tiers[tier].Load(); re != nil {
		return re, timeout, nil
	}
	re, err := regexp2.Compile(m.expr, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, 0, fmt.Errorf("tokenizer: compiling regex %s: %w", quotePattern(m.expr), err)
	}
	re.MatchTimeout = timeout
	// Two callers may compile the same tier at once; both copies work, one is kept.
	m.tiers[tier].CompareAndSwap(nil, re)
	return m.tiers[tier].Load(), timeout, nil
}

func (m *regexMatcher) findAll(s string, fn func(start, end int) error) error {
	if s == "" {
		return nil
	}
	runes := []rune(s)
	re, timeout, err := m.regex(len(runes))
	if err != nil {
		return err
	}
	// Matches come in increasing order, so rune indices convert to byte offsets with one
	// forward walk over s.
	runePos, bytePos := 0, 0
	toByte := func(ri int) int {
		for runePos < ri {
			_, n := utf8.DecodeRuneInString(s[bytePos:])
			bytePos += n
			runePos++
		}
		return bytePos
	}
	var cbErr error
	start := time.Now()
	err = re.FindRunesMatches(runes, 0, func(v regexp2.MatchView) bool {
		idx, length, ok := v.GroupRange(0)
		if !ok {
			return true
		}
		start := toByte(idx)
		end := toByte(idx + length)
		if cbErr = fn(start, end); cbErr != nil {
			return false
		}
		return true
	})
	if cbErr != nil {
		return cbErr
	}
	if err != nil {
		// The engine's timeout error quotes the whole text; report the pattern instead.
		if time.Since(start) >= timeout {
			return fmt.Errorf("%w: pattern %s took longer than %v to find its next match in a text of %d characters (catastrophic backtracking?)",
				ErrRegexBudget, quotePattern(m.expr), timeout, len(runes))
		}
		return fmt.Errorf("tokenizer: regex %s: %w", quotePattern(m.expr), err)
	}
	return nil
}

// quotePattern quotes a pattern for an error message, shortening a long one.
func quotePattern(expr string) string {
	const max = 200
	if len(expr) <= max {
		return strconv.Quote(expr)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(expr[cut]) {
		cut--
	}
	return strconv.Quote(expr[:cut]) + fmt.Sprintf("... (%d bytes)", len(expr))
}

// Patterns with hand-written matchers. They are the pre-tokenizer patterns of GPT-2 (also the
// one ByteLevel uses with use_regex), of Qwen2/Qwen3/MiniCPM5 and of Llama 3. The hand-written
// versions are several times faster than the backtracking engine and are checked against it by
// TestFastMatchersAgreeWithRegex and FuzzFastMatchers.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// compileRegex compiles an Oniguruma-style pattern from tokenizer.json.
func compileRegex(expr string) (matcher, error) {
	switch expr {
	case gpt2Pattern:
		return gpt2Matcher{}, nil
	case qwen2Pattern:
		return qwenMatcher{maxDigits: 1}, nil
	case llama3Pattern:
		return qwenMatcher{maxDigits: 3}, nil
	}
	return compileRegexp2(expr)
}

// compileRegexp2 compiles expr for the general engine; errors in the pattern show here.
func compileRegexp2(expr string) (*regexMatcher, error) {
	m := &regexMatcher{expr: expr}
	if _, _, err := m.regex(0); err != nil {
		return nil, err
	}
	return m, nil
}

// Character classes used by the hand-written matchers.
const (
	clsOther  = iota // [^\s\p{L}\p{N}]
	clsLetter        // \p{L}
	clsNumber        // \p{N}
	clsSpace         // \s
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			asciiClass[c] = clsLetter
		case c >= '0' && c <= '9':
			asciiClass[c] = clsNumber
		case c == ' ', c >= '\t' && c <= '\r':
			asciiClass[c] = clsSpace
		default:
			asciiClass[c] = clsOther
		}
	}
}

// classAt returns the class and the byte length of the character at s[i].
func classAt(s string, i int) (cls uint8, r rune, n int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n = utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.IsLetter(r):
		return clsLetter, r, n
	case unicode.IsNumber(r):
		return clsNumber, r, n
	case unicode.IsSpace(r):
		return clsSpace, r, n
	}
	return clsOther, r, n
}

// spanClass returns the end of the run of characters of class cls starting at i.
func spanClass(s string, i int, cls uint8) int {
	for i < len(s) {
		c, _, n := classAt(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of the contraction suffix ('s, 't, 're, 've, 'm, 'll, 'd)
// that follows an apostrophe at s[i-1], or 0. With fold set, letters match case-insensitively
// under Unicode simple case folding (so "ſ", the long s, matches s).
func contraction(s string, i int, fold bool) int {
	at := func(j int, want byte) bool {
		if j >= len(s) {
			return false
		}
		c := s[j]
		if c == want {
			return true
		}
		if !fold {
			return false
		}
		if c == want-'a'+'A' {
			return true
		}
		// U+017F LATIN SMALL LETTER LONG S folds to 's'.
		return want == 's' && c == 0xC5 && j+1 < len(s) && s[j+1] == 0xBF
	}
	width := func(j int) int {
		if s[j] == 0xC5 {
			return 2
		}
		return 1
	}
	switch {
	case at(i, 's'):
		return width(i)
	case at(i, 't'):
		return 1
	case at(i, 'r') && at(i+1, 'e'):
		return 2
	case at(i, 'v') && at(i+1, 'e'):
		return 2
	case at(i, 'm'):
		return 1
	case at(i, 'l') && at(i+1, 'l'):
		return 2
	case at(i, 'd'):
		return 1
	}
	return 0
}

// spaceRunEnd handles the trailing whitespace alternatives shared by the patterns:
// \s+(?!\S)|\s+ at a whitespace character at i.
func spaceRunEnd(s string, i, k int) int {
	// k is the end of the maximal whitespace run that starts at i.
	_, n := utf8.DecodeLastRuneInString(s[:k])
	if k == len(s) || k-n == i {
		return k
	}
	// Back off one character so that the look-ahead sees whitespace, not \S.
	return k - n
}

// gpt2Matcher implements gpt2Pattern.
type gpt2Matcher struct{}

func (gpt2Matcher) findAll(s string, fn func(start, end int) error) error {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		if err := fn(i, end); err != nil {
			return err
		}
		i = end
	}
	return nil
}

func gpt2MatchAt(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	c0, _, n0 := classAt(s, i)
	// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
	if s[i] == ' ' && i+1 < len(s) {
		if c1, _, _ := classAt(s, i+1); c1 != clsSpace {
			return spanClass(s, i+1, c1)
		}
	}
	if c0 != clsSpace {
		return spanClass(s, i+n0, c0)
	}
	// '\s+(?!\S)|\s+'
	return spaceRunEnd(s, i, spanClass(s, i, clsSpace))
}

// qwenMatcher implements qwen2Pattern (maxDigits 1) and llama3Pattern (maxDigits 3).
type qwenMatcher struct {
	maxDigits int
}

func (m qwenMatcher) findAll(s string, fn func(start, end int) error) error {
	for i := 0; i < len(s); {
		end := m.matchAt(s, i)
		if err := fn(i, end); err != nil {
			return err
		}
		i = end
	}
	return nil
}

func (m qwenMatcher) matchAt(s string, i int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contraction(s, i+1, true); n > 0 {
			return i + 1 + n
		}
	}
	c0, r0, n0 := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0 == clsLetter {
		return spanClass(s, i+n0, clsLetter)
	}
	if c0 != clsNumber && r0 != '\r' && r0 != '\n' && i+n0 < len(s) {
		if c1, _, _ := classAt(s, i+n0); c1 == clsLetter {
			return spanClass(s, i+n0, clsLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0 == clsNumber {
		j := i + n0
		for d := 1; d < m.maxDigits && j < len(s); d++ {
			c, _, n := classAt(s, j)
			if c != clsNumber {
				break
			}
			j += n
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := -1
	if s[i] == ' ' && i+1 < len(s) {
		if c1, _, _ := classAt(s, i+1); c1 == clsOther {
			j = spanClass(s, i+1, clsOther)
		}
	}
	if j < 0 && c0 == clsOther {
		j = spanClass(s, i, clsOther)
	}
	if j >= 0 {
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Here c0 is whitespace.
	k := spanClass(s, i, clsSpace)
	// \s*[\r\n]+ : up to and including the last line break of the run.
	for p := k - 1; p >= i; p-- {
		if s[p] == '\r' || s[p] == '\n' {
			return p + 1
		}
	}
	// \s+(?!\S)|\s+
	return spaceRunEnd(s, i, k)
}
