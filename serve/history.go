package serve

import (
	"container/list"
	"sync"
)

// histories keeps each session's conversation (the prefix plus output of
// its latest call) for Continue, bounded by a total token count and
// evicted least recently used first.
type histories struct {
	mu    sync.Mutex
	limit int
	total int
	ll    *list.List // of *conversation, most recent first
	byID  map[string]*list.Element
}

type conversation struct {
	id     string
	tokens []int32
}

func newHistories(limit int) *histories {
	return &histories{limit: limit, ll: list.New(), byID: map[string]*list.Element{}}
}

// get returns a copy of a session's conversation.
func (h *histories) get(id string) ([]int32, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.byID[id]
	if !ok {
		return nil, false
	}
	h.ll.MoveToFront(el)
	return append([]int32(nil), el.Value.(*conversation).tokens...), true
}

// put records a session's conversation (taking ownership of tokens). A
// conversation longer than the whole limit is not kept.
func (h *histories) put(id string, tokens []int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.byID[id]; ok {
		h.remove(el)
	}
	if len(tokens) > h.limit {
		return
	}
	h.byID[id] = h.ll.PushFront(&conversation{id: id, tokens: tokens})
	h.total += len(tokens)
	for h.total > h.limit {
		h.remove(h.ll.Back())
	}
}

func (h *histories) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.byID[id]; ok {
		h.remove(el)
	}
}

func (h *histories) remove(el *list.Element) {
	c := h.ll.Remove(el).(*conversation)
	delete(h.byID, c.id)
	h.total -= len(c.tokens)
}

// size reports the sessions and tokens kept.
func (h *histories) size() (sessions, tokens int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID), h.total
}
