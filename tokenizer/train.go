package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// CodePattern is the pre-tokenizer pattern Train uses by default: GPT-4's, also Llama 3's.
// It keeps a word with the one character before it (".Name", "\tif", " x"), groups digits
// by at most three, and ends a run of punctuation with its line breaks ("{\n"), which suits
// source code; this package matches it with a hand-written matcher.
const CodePattern = llama3Pattern

// The special tokens Train adds by default.
const (
	DefaultBOSToken  = "<|bos|>"
	DefaultEOSToken  = "<|eos|>"
	DefaultPadToken  = "<|pad|>"
	DefaultMaskToken = "<|mask|>"
)

// TrainConfig configures Train. The zero value trains the default tokenizer.
type TrainConfig struct {
	// VocabSize is the size of the whole vocabulary, the four special tokens included.
	// Default 8192; at least 260 (the 256 bytes and the special tokens).
	VocabSize int
	// Pattern is the pre-tokenizer's regular expression (Oniguruma syntax, as in
	// tokenizer.json); merges never cross the pieces it cuts. Default CodePattern.
	Pattern string
	// MinPairCount is the fewest occurrences a pair needs to be merged; training stops
	// early, with a smaller vocabulary, when no pair has that many. Default 2.
	MinPairCount int
	// BOS, EOS, Pad and Mask are the special tokens, which take the last four ids in this
	// order, so Mask is the last row of the vocabulary. Defaults DefaultBOSToken, ...
	BOS, EOS, Pad, Mask string
}

func (c TrainConfig) withDefaults() (TrainConfig, error) {
	if c.VocabSize == 0 {
		c.VocabSize = 8192
	}
	if c.Pattern == "" {
		c.Pattern = CodePattern
	}
	if c.MinPairCount == 0 {
		c.MinPairCount = 2
	}
	for _, f := range []struct {
		dst *string
		def string
	}{{&c.BOS, DefaultBOSToken}, {&c.EOS, DefaultEOSToken}, {&c.Pad, DefaultPadToken}, {&c.Mask, DefaultMaskToken}} {
		if *f.dst == "" {
			*f.dst = f.def
		}
	}
	specials := c.specials()
	if c.VocabSize < 256+len(specials) {
		return c, fmt.Errorf("tokenizer: train: vocabulary size %d is below %d (256 bytes and %d special tokens)", c.VocabSize, 256+len(specials), len(specials))
	}
	if c.MinPairCount < 1 {
		return c, fmt.Errorf("tokenizer: train: MinPairCount %d is below 1", c.MinPairCount)
	}
	for i, s := range specials {
		if !utf8.ValidString(s) || slices.Contains(specials[:i], s) {
			return c, fmt.Errorf("tokenizer: train: special token %q is repeated or not UTF-8", s)
		}
	}
	return c, nil
}

func (c TrainConfig) specials() []string { return []string{c.BOS, c.EOS, c.Pad, c.Mask} }

// TrainedBPE is a byte-level BPE vocabulary learned by Train. Ids 0 to 255 are the bytes,
// then come the merged tokens in the order they were learned, then BOS, EOS, Pad and Mask.
type TrainedBPE struct {
	cfg TrainConfig
	// tokens holds the bytes of each non-special token, indexed by id.
	tokens []string
	// merges lists the merged pairs of ids, by rank.
	merges [][2]int32
}

// VocabSize is the number of ids, special tokens included. It is below the configured
// size when training ran out of pairs with MinPairCount occurrences.
func (b *TrainedBPE) VocabSize() int { return len(b.tokens) + len(b.cfg.specials()) }

// NumMerges is the number of merges learned.
func (b *TrainedBPE) NumMerges() int { return len(b.merges) }

// Train learns a byte-level BPE tokenizer from texts with the algorithm of the Hugging Face
// tokenizers library's BpeTrainer for a ByteLevel tokenizer: texts are cut into pieces by
// cfg.Pattern, and the most frequent pair of adjacent tokens is merged again and again until
// the vocabulary is full. Ties go to the pair with the smaller (left, right) ids, so the
// result depends only on the texts and cfg. Texts must be valid UTF-8.
//
// It counts the distinct pieces once (in parallel) and then updates pair counts
// incrementally, so its time grows about linearly with the corpus.
func Train(ctx context.Context, texts iter.Seq[string], cfg TrainConfig) (*TrainedBPE, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := compileRegex(cfg.Pattern)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: train: %w", err)
	}
	counts, err := countWords(ctx, texts, m)
	if err != nil {
		return nil, err
	}
	b := &TrainedBPE{cfg: cfg}
	b.tokens = make([]string, 256, cfg.VocabSize)
	for i := range b.tokens {
		b.tokens[i] = string([]byte{byte(i)})
	}
	if err := b.learnMerges(ctx, counts, cfg.VocabSize-len(cfg.specials()), int64(cfg.MinPairCount)); err != nil {
		return nil, err
	}
	return b, nil
}

// countWords cuts every text into pieces with m and counts each distinct piece, with one
// worker per CPU.
func countWords(ctx context.Context, texts iter.Seq[string], m matcher) (map[string]int64, error) {
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan string, 4*workers)
	maps := make([]map[string]int64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		maps[w] = map[string]int64{}
		wg.Go(func() {
			counts := maps[w]
			for text := range jobs {
				if errs[w] != nil {
					continue // drain
				}
				if !utf8.ValidString(text) {
					errs[w] = fmt.Errorf("tokenizer: train: %w", ErrInvalidUTF8)
					continue
				}
				errs[w] = splitByMatches(piece{text: text}, m, behaviorIsolated, false, func(p piece) error {
					if n, ok := counts[p.text]; ok {
						counts[p.text] = n + 1
					} else {
						counts[strings.Clone(p.text)] = 1
					}
					return nil
				})
			}
		})
	}
	var ctxErr error
	for text := range texts {
		if ctxErr = ctx.Err(); ctxErr != nil {
			break
		}
		jobs <- text
	}
	close(jobs)
	wg.Wait()
	if ctxErr != nil {
		return nil, ctxErr
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	total := maps[0]
	for _, other := range maps[1:] {
		for w, n := range other {
			total[w] += n
		}
	}
	return total, nil
}

// pairCount is a heap entry: a pair of token ids (pairKey) and its count when pushed.
type pairCount struct {
	count int64
	pair  uint64
}

// before orders the heap: the higher count first, then the smaller pair.
func (a pairCount) before(b pairCount) bool {
	if a.count != b.count {
		return a.count > b.count
	}
	return a.pair < b.pair
}

type pairHeap []pairCount

func (h *pairHeap) push(x pairCount) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() pairCount {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < len(s) && s[l].before(s[best]) {
			best = l
		}
		if r := l + 1; r < len(s) && s[r].before(s[best]) {
			best = r
		}
		if best == i {
			break
		}
		s[i], s[best] = s[best], s[i]
		i = best
	}
	*h = s
	return top
}

// trainWord is a distinct piece as its current token ids, with its number of occurrences.
type trainWord struct {
	ids   []int32
	count int64
}

// learnMerges merges pairs until there are vocab tokens or no pair occurs minCount times.
//
// pairs holds the exact count of every adjacent pair over all words; where lists, for
// each pair, the words it may occur in (entries can be stale or repeated: a word is
// checked when merged). The heap holds at least one entry per pair whose count is at least
// the pair's current count, so an entry popped with its current count is the true maximum.
func (b *TrainedBPE) learnMerges(ctx context.Context, counts map[string]int64, vocab int, minCount int64) error {
	keys := make([]string, 0, len(counts))
	for w := range counts {
		keys = append(keys, w)
	}
	slices.Sort(keys)
	words := make([]trainWord, len(keys))
	pairs := map[uint64]int64{}
	where := map[uint64][]int32{}
	for i, w := range keys {
		ids := make([]int32, len(w))
		for j := range len(w) {
			ids[j] = int32(w[j])
		}
		words[i] = trainWord{ids: ids, count: counts[w]}
		for j := 1; j < len(ids); j++ {
			p := pairKey(ids[j-1], ids[j])
			pairs[p] += counts[w]
			if ws := where[p]; len(ws) == 0 || ws[len(ws)-1] != int32(i) {
				where[p] = append(ws, int32(i))
			}
		}
	}
	h := make(pairHeap, 0, len(pairs))
	for p, n := range pairs {
		h.push(pairCount{n, p})
	}

	tokenID := make(map[string]int32, vocab)
	for id, tok := range b.tokens {
		tokenID[tok] = int32(id)
	}
	merged := map[uint64]bool{}
	var grown []uint64
	add := func(p uint64, delta int64, word int32) {
		n := pairs[p] + delta
		if n == 0 {
			delete(pairs, p)
		} else {
			pairs[p] = n
		}
		if delta > 0 {
			grown = append(grown, p)
			if ws := where[p]; len(ws) == 0 || ws[len(ws)-1] != word {
				where[p] = append(ws, word)
			}
		}
	}
	for step := 0; len(b.tokens) < vocab && len(h) > 0; step++ {
		if step%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		top := h.pop()
		cur := pairs[top.pair]
		if cur != top.count {
			if cur > 0 {
				h.push(pairCount{cur, top.pair})
			}
			continue
		}
		if cur < minCount {
			break
		}
		left, right := int32(top.pair>>32), int32(uint32(top.pair))
		text := b.tokens[left] + b.tokens[right]
		id, ok := tokenID[text]
		if !ok {
			id = int32(len(b.tokens))
			b.tokens = append(b.tokens, text)
			tokenID[text] = id
		}
		if !merged[top.pair] {
			merged[top.pair] = true
			b.merges = append(b.merges, [2]int32{left, right})
		}
		ws := where[top.pair]
		delete(where, top.pair)
		slices.Sort(ws)
		ws = slices.Compact(ws)
		grown = grown[:0]
		for _, wi := range ws {
			mergeWord(&words[wi], wi, left, right, id, add)
		}
		delete(pairs, top.pair)
		slices.Sort(grown)
		for _, p := range slices.Compact(grown) {
			if n := pairs[p]; n > 0 {
				h.push(pairCount{n, p})
			}
		}
	}
	return nil
}

// mergeWord replaces each occurrence of the pair (left, right) in w, from left to right,
// by id, and reports through add how the counts of the neighbouring pairs change. The
// count of the merged pair itself is the caller's to drop.
func mergeWord(w *trainWord, wi, left, right, id int32, add func(p uint64, delta int64, word int32)) {
	ids, c := w.ids, w.count
	out := ids[:0] // compacts in place: out never overtakes the read position
	for i := 0; i < len(ids); {
		if i+1 < len(ids) && ids[i] == left && ids[i+1] == right {
			if len(out) > 0 {
				prev := out[len(out)-1]
				add(pairKey(prev, left), -c, wi)
				add(pairKey(prev, id), c, wi)
			}
			if i+2 < len(ids) {
				next := ids[i+2]
				add(pairKey(right, next), -c, wi)
				add(pairKey(id, next), c, wi)
			}
			out = append(out, id)
			i += 2
			continue
		}
		out = append(out, ids[i])
		i++
	}
	w.ids = out
}
