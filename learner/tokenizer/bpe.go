package tokenizer

import (
	"fmt"
	"sync"
)

// bpe is the byte-level BPE model: every pre-token starts as one symbol per
// byte and adjacent symbols are merged by rank, lowest first, leftmost first
// among equal ranks, until no ranked pair remains.
type bpe struct {
	byteID       [256]int32
	merges       map[uint64]mergeRule // key: left id << 32 | right id
	ranked       [][2]int32           // merges in rank order (for Marshal)
	ignoreMerges bool
	vocab        map[string]int // the model's own vocabulary by string (ignore_merges lookup)
	special      []bool         // by id: a special added token (never a result of ignore_merges)

	mu    sync.RWMutex
	cache map[string][]int32
}

type mergeRule struct {
	rank int32
	id   int32
}

// cacheMax bounds the pre-token cache; pieces longer than cacheMaxLen bytes
// are never cached.
const (
	cacheMax    = 1 << 17
	cacheMaxLen = 64
)

func newBPE(t *HF, merges [][2]string, ignoreMerges bool) (*bpe, error) {
	m := &bpe{
		merges:       make(map[uint64]mergeRule, len(merges)),
		ignoreMerges: ignoreMerges,
		cache:        make(map[string][]int32, 1024),
	}
	if ignoreMerges {
		m.vocab = t.src.Model.Vocab
		m.special = make([]bool, len(t.tokens))
		for id := range t.tokens {
			m.special[id] = t.tokens[id].special
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := t.src.Model.Vocab[string(byteToRune[b])]
		if !ok {
			return nil, fmt.Errorf("model.vocab lacks %q, the byte-level character of byte 0x%02x: not a byte-level BPE vocabulary", string(byteToRune[b]), b)
		}
		m.byteID[b] = int32(id)
	}
	m.ranked = make([][2]int32, 0, len(merges))
	for rank, pair := range merges {
		a, okA := t.src.Model.Vocab[pair[0]]
		b, okB := t.src.Model.Vocab[pair[1]]
		c, okC := t.src.Model.Vocab[pair[0]+pair[1]]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("model.merges[%d] %q + %q: a token of the merge or its result is not in model.vocab", rank, pair[0], pair[1])
		}
		m.ranked = append(m.ranked, [2]int32{int32(a), int32(b)})
		if t.tokens[c].special {
			// A merge may never build a special token: text encoded with
			// special parsing off must not be able to produce one.
			continue
		}
		// As in Hugging Face's reader, a repeated pair keeps its last rank.
		m.merges[uint64(a)<<32|uint64(b)] = mergeRule{rank: int32(rank), id: int32(c)}
	}
	return m, nil
}

// encode appends the ids of one pre-token (raw bytes, not yet in the
// byte-level alphabet) to dst.
func (m *bpe) encode(dst []int, piece string) []int {
	if len(piece) == 0 {
		return dst
	}
	if len(piece) == 1 {
		return append(dst, int(m.byteID[piece[0]]))
	}
	cacheable := len(piece) <= cacheMaxLen
	if cacheable {
		m.mu.RLock()
		ids, ok := m.cache[piece]
		m.mu.RUnlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	var ids []int32
	if m.ignoreMerges {
		if id, ok := m.vocab[byteLevelEncode([]byte(piece))]; ok && !m.special[id] {
			ids = []int32{int32(id)}
		}
	}
	if ids == nil {
		ids = m.merge(piece)
	}
	if cacheable {
		m.mu.Lock()
		if len(m.cache) < cacheMax {
			m.cache[piece] = ids
		}
		m.mu.Unlock()
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// merge runs BPE on one pre-token. Symbols form a linked list; candidate
// merges wait in a binary heap ordered by (rank, position), and an entry
// whose symbols have changed since it was pushed is skipped when popped.
func (m *bpe) merge(piece string) []int32 {
	n := len(piece)
	sc := scratchPool.Get().(*mergeScratch)
	defer scratchPool.Put(sc)
	if cap(sc.links) < 3*n {
		sc.links = make([]int32, 3*n)
	}
	// id[i] < 0 marks a symbol merged into its left neighbour.
	id, prev, next := sc.links[:n], sc.links[n:2*n], sc.links[2*n:3*n]
	for i := 0; i < n; i++ {
		id[i] = m.byteID[piece[i]]
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	h := sc.heap[:0]
	push := func(pos int32) {
		nx := next[pos]
		if nx < 0 {
			return
		}
		if r, ok := m.merges[uint64(id[pos])<<32|uint64(id[nx])]; ok {
			h.push(candidate{rank: r.rank, pos: pos, id: r.id})
		}
	}
	for i := 0; i < n-1; i++ {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		if id[c.pos] < 0 || next[c.pos] < 0 {
			continue
		}
		right := next[c.pos]
		r, ok := m.merges[uint64(id[c.pos])<<32|uint64(id[right])]
		if !ok || r.id != c.id || r.rank != c.rank {
			continue // stale: a neighbour was merged since
		}
		id[c.pos] = c.id
		id[right] = -1
		next[c.pos] = next[right]
		if nr := next[right]; nr >= 0 {
			prev[nr] = c.pos
		}
		if p := prev[c.pos]; p >= 0 {
			push(p)
		}
		push(c.pos)
	}
	sc.heap = h[:0]
	count := 0
	for i := int32(0); i >= 0; i = next[i] {
		count++
	}
	out := make([]int32, 0, count)
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, id[i])
	}
	return out
}

// mergeScratch is the reusable working memory of merge.
type mergeScratch struct {
	links []int32
	heap  mergeHeap
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

type candidate struct {
	rank int32
	pos  int32
	id   int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// mergeHeap is a binary min-heap of candidates.
type mergeHeap []candidate

func (h *mergeHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
