package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is a byte-pair-encoding model (tokenizer.json "model" of type BPE).
//
// A word is first cut into characters (or, for byte-level tokenizers, bytes); then the pair of
// adjacent symbols with the lowest merge rank is merged, again and again, until no adjacent
// pair has a merge. A min-heap keyed by (rank, position) over a doubly linked list of symbols
// makes this O(n log n) in the length of the word, and finished words are cached.
type bpeModel struct {
	vocab map[string]int32
	// merges maps the pair (left id, right id) to (rank, id of the merged token).
	merges map[uint64]uint64

	unkToken     string
	hasUnk       bool
	fuseUnk      bool
	byteFallback bool
	fallbackIDs  [256]int32 // id of "<0xXX>", or -1
	prefix       string     // continuing_subword_prefix
	suffix       string     // end_of_word_suffix
	ignoreMerges bool

	// Fast lookup of single-character tokens, used when there is no prefix or suffix.
	bmpIDs    []int32 // indexed by rune below 0x10000; -1 when absent
	astralIDs map[rune]int32
	// byteIDs are the ids of the 256 byte-level characters; byteIDsOK when all exist.
	byteIDs   [256]int32
	byteIDsOK bool

	// pairs holds every two characters that stand next to each other in some vocabulary
	// entry; bytePairs is the same for raw bytes via their byte-level characters. Where two
	// neighbouring characters are not in it, no merge can join them (see tokenize).
	pairs     map[uint64]struct{}
	bytePairs bytePairSet

	cache wordCache
}

const (
	// maxCachedWord is the longest word (in bytes) whose tokens are cached.
	maxCachedWord = 256
	// wordCacheSize bounds the number of words in each of the cache's two generations.
	wordCacheSize = 1 << 15
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// parseBPE builds a BPE model from the "model" object of tokenizer.json: o holds its small
// fields, vocab and merges the raw JSON of its two large ones (nil when absent).
func parseBPE(o object, vocabJSON, mergesJSON json.RawMessage) (*bpeModel, error) {
	wrap := func(err error) error { return fmt.Errorf("model BPE: %w", err) }
	if v := o["dropout"]; v != nil {
		num, ok := v.(json.Number)
		if !ok {
			return nil, wrap(fmt.Errorf("field \"dropout\": want a number, got %s", jsonKind(v)))
		}
		d, err := num.Float64()
		if err != nil {
			return nil, wrap(fmt.Errorf("field \"dropout\": %w", err))
		}
		if d > 0 {
			return nil, fmt.Errorf("%w: BPE dropout %v (it makes encoding random)", ErrUnsupported, d)
		}
	}
	var vocab map[string]int
	if !isNull(vocabJSON) {
		if err := json.Unmarshal(vocabJSON, &vocab); err != nil {
			return nil, wrap(fmt.Errorf("field \"vocab\": %w", err))
		}
	}
	m := &bpeModel{vocab: make(map[string]int32, len(vocab))}
	for tok, id := range vocab {
		if id < 0 || id > maxTokenID {
			return nil, wrap(fmt.Errorf("field \"vocab\": token %q has id %d out of range [0, %d]", tok, id, maxTokenID))
		}
		m.vocab[tok] = int32(id)
	}
	var err error
	if m.unkToken, m.hasUnk, err = o.optStr("unk_token"); err != nil {
		return nil, wrap(err)
	}
	if m.fuseUnk, err = o.boolean("fuse_unk", false); err != nil {
		return nil, wrap(err)
	}
	if m.byteFallback, err = o.boolean("byte_fallback", false); err != nil {
		return nil, wrap(err)
	}
	if m.ignoreMerges, err = o.boolean("ignore_merges", false); err != nil {
		return nil, wrap(err)
	}
	if m.prefix, err = o.str("continuing_subword_prefix", ""); err != nil {
		return nil, wrap(err)
	}
	if m.suffix, err = o.str("end_of_word_suffix", ""); err != nil {
		return nil, wrap(err)
	}
	mergeList, err := parseMerges(mergesJSON)
	if err != nil {
		return nil, wrap(err)
	}
	m.merges = make(map[uint64]uint64, len(mergeList))
	for rank, p := range mergeList {
		a, ok := m.vocab[p[0]]
		if !ok {
			return nil, wrap(fmt.Errorf("merge %d: token %q is not in the vocabulary", rank, p[0]))
		}
		b, ok := m.vocab[p[1]]
		if !ok {
			return nil, wrap(fmt.Errorf("merge %d: token %q is not in the vocabulary", rank, p[1]))
		}
		right := p[1]
		if m.prefix != "" {
			if !strings.HasPrefix(right, m.prefix) {
				return nil, wrap(fmt.Errorf("merge %d: %q lacks the continuing-subword prefix %q", rank, right, m.prefix))
			}
			right = right[len(m.prefix):]
		}
		merged, ok := m.vocab[p[0]+right]
		if !ok {
			return nil, wrap(fmt.Errorf("merge %d: merged token %q is not in the vocabulary", rank, p[0]+right))
		}
		// A repeated pair keeps its last rank, as a map built in order would.
		m.merges[pairKey(a, b)] = uint64(rank)<<32 | uint64(uint32(merged))
	}
	for b := 0; b < 256; b++ {
		m.fallbackIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallbackIDs[b] = id
		}
	}
	m.bmpIDs = make([]int32, 0x10000)
	for i := range m.bmpIDs {
		m.bmpIDs[i] = -1
	}
	m.astralIDs = make(map[rune]int32)
	for tok, id := range m.vocab {
		r, n := utf8.DecodeRuneInString(tok)
		if n != len(tok) || n == 0 || (r == utf8.RuneError && n == 1) {
			continue
		}
		if r < 0x10000 {
			m.bmpIDs[r] = id
		} else {
			m.astralIDs[r] = id
		}
	}
	m.byteIDsOK = true
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[byteToString[b]]
		if !ok {
			id, m.byteIDsOK = -1, false
		}
		m.byteIDs[b] = id
	}
	m.pairs = map[uint64]struct{}{}
	for tok := range m.vocab {
		prev := rune(-1)
		for _, r := range tok {
			if prev >= 0 {
				m.pairs[uint64(prev)<<32|uint64(r)] = struct{}{}
			}
			prev = r
		}
	}
	if m.byteIDsOK {
		for a := 0; a < 256; a++ {
			for b := 0; b < 256; b++ {
				if _, ok := m.pairs[uint64(byteToChar[a])<<32|uint64(byteToChar[b])]; ok {
					m.bytePairs.set(byte(a), byte(b))
				}
			}
		}
	}
	m.cache.init(wordCacheSize)
	return m, nil
}

// bytePairSet is a set of byte pairs.
type bytePairSet [256 * 256 / 64]uint64

func (s *bytePairSet) set(a, b byte) {
	i := int(a)<<8 | int(b)
	s[i>>6] |= 1 << (i & 63)
}

func (s *bytePairSet) has(a, b byte) bool {
	i := int(a)<<8 | int(b)
	return s[i>>6]&(1<<(i&63)) != 0
}

// parseMerges reads merges in either the "a b" string form or the ["a", "b"] array form.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		out := make([][2]string, len(asStrings))
		for i, s := range asStrings {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("merge %d (%q) is not two tokens separated by a space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var asPairs [][]string
	if err := json.Unmarshal(raw, &asPairs); err != nil {
		return nil, fmt.Errorf("field \"merges\": want strings or pairs of strings: %w", err)
	}
	out := make([][2]string, len(asPairs))
	for i, p := range asPairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d parts, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// tokenize appends the ids of word w. With rawBytes set, w holds raw bytes that stand for
// their byte-level characters (the pre-tokenizer left the mapping to the model).
//
// Short words go through the cache. A long word (without a pre-tokenizer, the whole text is
// one word) is first cut where no merge can ever join the two sides: between two characters
// that are tokens by themselves and that appear next to each other in no vocabulary entry, so
// that no merged token can span them. Merging the parts separately then gives exactly the
// result of merging the whole word, and the parts, word-sized, hit the cache.
func (m *bpeModel) tokenize(w string, rawBytes bool, dst []int) ([]int, error) {
	if w == "" {
		return dst, nil
	}
	if len(w) <= maxCachedWord {
		return m.tokenizeCached(w, rawBytes, true, dst)
	}
	if m.ignoreMerges {
		word := w
		if rawBytes {
			word = byteLevelEncode(w)
		}
		if id, ok := m.vocab[word]; ok {
			return append(dst, int(id)), nil
		}
	}
	if m.prefix != "" || m.suffix != "" {
		return m.tokenizeUncached(w, rawBytes, false, dst)
	}
	var err error
	start := 0
	cut := func(end int) {
		if err != nil {
			return
		}
		seg := w[start:end]
		start = end
		if len(seg) <= maxCachedWord && !m.ignoreMerges {
			dst, err = m.tokenizeCached(seg, rawBytes, false, dst)
		} else {
			dst, err = m.tokenizeUncached(seg, rawBytes, false, dst)
		}
	}
	if rawBytes && m.byteIDsOK {
		for i := 1; i < len(w); i++ {
			if !m.bytePairs.has(w[i-1], w[i]) {
				cut(i)
			}
		}
	} else {
		prev, prevOK := rune(-1), false
		for i, r := range w {
			ok := m.charID(r) >= 0
			if i > 0 && ok && prevOK {
				if _, joined := m.pairs[uint64(prev)<<32|uint64(r)]; !joined {
					cut(i)
				}
			}
			prev, prevOK = r, ok
		}
	}
	cut(len(w))
	return dst, err
}

// tokenizeCached tokenizes w through the word cache. The cache holds results with
// ignore_merges applied, so it is only used for whole words or when ignore_merges is off.
func (m *bpeModel) tokenizeCached(w string, rawBytes, wholeWord bool, dst []int) ([]int, error) {
	if ids, ok := m.cache.get(w); ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst, nil
	}
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	ids, err := m.encodeWord(w, rawBytes, wholeWord, sc)
	if err != nil {
		return dst, err
	}
	m.cache.put(w, append([]int32(nil), ids...))
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	sc.ids = ids[:0]
	return dst, nil
}

// tokenizeUncached tokenizes w without the cache.
func (m *bpeModel) tokenizeUncached(w string, rawBytes, wholeWord bool, dst []int) ([]int, error) {
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	ids, err := m.encodeWord(w, rawBytes, wholeWord, sc)
	if err != nil {
		return dst, err
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	sc.ids = ids[:0]
	return dst, nil
}

// encodeWord runs BPE on w. ignore_merges (a word that is a token is that token) applies
// only when w is a whole word.
func (m *bpeModel) encodeWord(w string, rawBytes, wholeWord bool, sc *bpeScratch) ([]int32, error) {
	if rawBytes && m.byteIDsOK && m.prefix == "" && m.suffix == "" && !(m.ignoreMerges && wholeWord) {
		ids := sc.ids[:0]
		for i := 0; i < len(w); i++ {
			ids = append(ids, m.byteIDs[w[i]])
		}
		return m.mergeAll(ids, sc), nil
	}
	word := w
	if rawBytes {
		word = byteLevelEncode(w)
	}
	return m.tokenizeWord(word, wholeWord, sc)
}

// charID returns the id of the single-character token r, or -1.
func (m *bpeModel) charID(r rune) int32 {
	if r < 0x10000 {
		if r == utf8.RuneError {
			if id, ok := m.vocab[string(r)]; ok {
				return id
			}
			return -1
		}
		return m.bmpIDs[r]
	}
	if id, ok := m.astralIDs[r]; ok {
		return id
	}
	return -1
}

// tokenizeWord cuts w into its initial symbols and merges them.
func (m *bpeModel) tokenizeWord(w string, wholeWord bool, sc *bpeScratch) ([]int32, error) {
	if m.ignoreMerges && wholeWord {
		if id, ok := m.vocab[w]; ok {
			return append(sc.ids[:0], id), nil
		}
	}
	ids := sc.ids[:0]
	pendingUnk, havePending := int32(-1), false
	unkID := func() (int32, error) {
		id, ok := m.vocab[m.unkToken]
		if !ok {
			return 0, fmt.Errorf("tokenizer: unknown-token %q is not in the vocabulary", m.unkToken)
		}
		return id, nil
	}
	simple := m.prefix == "" && m.suffix == ""
	for i := 0; i < len(w); {
		r, n := utf8.DecodeRuneInString(w[i:])
		isFirst, isLast := i == 0, i+n == len(w)
		sym := w[i : i+n]
		i += n
		id := int32(-1)
		if simple {
			id = m.charID(r)
		} else {
			if !isFirst && m.prefix != "" {
				sym = m.prefix + sym
			}
			if isLast && m.suffix != "" {
				sym += m.suffix
			}
			if v, ok := m.vocab[sym]; ok {
				id = v
			}
		}
		if id >= 0 {
			if havePending {
				ids = append(ids, pendingUnk)
				havePending = false
			}
			ids = append(ids, id)
			continue
		}
		if m.byteFallback {
			ok := true
			for j := 0; j < len(sym); j++ {
				if m.fallbackIDs[sym[j]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				// As in the reference implementation, a pending unknown token stays pending.
				for j := 0; j < len(sym); j++ {
					ids = append(ids, m.fallbackIDs[sym[j]])
				}
				continue
			}
		}
		if m.hasUnk {
			u, err := unkID()
			if err != nil {
				return nil, err
			}
			if havePending && !m.fuseUnk {
				ids = append(ids, pendingUnk)
			}
			pendingUnk, havePending = u, true
		}
		// Without an unknown token the character is dropped.
	}
	if havePending {
		ids = append(ids, pendingUnk)
	}
	return m.mergeAll(ids, sc), nil
}

// bpeSym is one symbol of a word being merged, linked to its neighbours.
type bpeSym struct {
	id         int32
	prev, next int32
	dead       bool
}

// bpeMerge is a candidate merge of the symbol at pos with the one after it.
type bpeMerge struct {
	rank  uint32
	pos   int32
	newID int32
}

func (a bpeMerge) less(b bpeMerge) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// bpeScratch holds reusable buffers for one tokenization.
type bpeScratch struct {
	ids  []int32
	syms []bpeSym
	heap []bpeMerge
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// mergeAll applies the merges to the symbols in ids and returns the result (reusing ids).
func (m *bpeModel) mergeAll(ids []int32, sc *bpeScratch) []int32 {
	n := len(ids)
	if n < 2 {
		return ids
	}
	syms := sc.syms[:0]
	for i, id := range ids {
		syms = append(syms, bpeSym{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[n-1].next = -1
	h := sc.heap[:0]
	for i := 0; i+1 < n; i++ {
		if v, ok := m.merges[pairKey(ids[i], ids[i+1])]; ok {
			h = append(h, bpeMerge{rank: uint32(v >> 32), pos: int32(i), newID: int32(uint32(v))})
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		if last > 0 {
			siftDown(h, 0)
		}
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		nextPos := s.next
		right := syms[nextPos]
		// Skip entries made stale by earlier merges.
		if v, ok := m.merges[pairKey(s.id, right.id)]; !ok || int32(uint32(v)) != top.newID {
			continue
		}
		s.id = top.newID
		s.next = right.next
		syms[nextPos].dead = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if s.prev >= 0 {
			if v, ok := m.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h = heapPush(h, bpeMerge{rank: uint32(v >> 32), pos: s.prev, newID: int32(uint32(v))})
			}
		}
		if s.next >= 0 {
			if v, ok := m.merges[pairKey(s.id, syms[s.next].id)]; ok {
				h = heapPush(h, bpeMerge{rank: uint32(v >> 32), pos: top.pos, newID: int32(uint32(v))})
			}
		}
	}
	out := ids[:0]
	for i := 0; i >= 0; i = int(syms[i].next) {
		out = append(out, syms[i].id)
	}
	sc.syms, sc.heap = syms[:0], h[:0]
	return out
}

func siftDown(h []bpeMerge, i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			c = r
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

func heapPush(h []bpeMerge, x bpeMerge) []bpeMerge {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// wordCache is a bounded, concurrency-safe cache of tokenized words. It keeps two
// generations: new words go into the current one; when that is full it becomes the old
// generation and the one before is dropped. A word found in the old generation moves back to
// the current one, so words in frequent use stay cached while one-off words age out.
type wordCache struct {
	mu       sync.RWMutex
	cur, old map[string][]int32
	max      int
}

func (c *wordCache) init(max int) {
	c.max = max
	c.cur = make(map[string][]int32)
}

// reset empties the cache.
func (c *wordCache) reset() {
	c.mu.Lock()
	c.cur, c.old = make(map[string][]int32), nil
	c.mu.Unlock()
}

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.cur[w]
	if ok {
		c.mu.RUnlock()
		return ids, true
	}
	ids, ok = c.old[w]
	c.mu.RUnlock()
	if ok {
		c.put(w, ids)
	}
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string][]int32, c.max/2)
	}
	c.cur[strings.Clone(w)] = ids
	c.mu.Unlock()
}
