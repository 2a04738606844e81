package engine

import (
	"container/list"
	"slices"
	"sync"
)

// sessionEntry is a finished sequence's cache kept for its session.
type sessionEntry struct {
	id      string
	cache   Cache
	version int64
}

// sessionStore keeps caches of finished session requests, least recently
// used evicted first once more than limit positions are cached in all.
type sessionStore struct {
	mu     sync.Mutex
	limit  int
	tokens int
	lru    *list.List // front: most recent; values *sessionEntry
	byID   map[string]*list.Element
	// active holds, per session, the running requests and whether each
	// will store its cache when it finishes (false once the session was
	// released meanwhile).
	active map[string]map[*seq]bool
}

func newSessionStore(limit int) *sessionStore {
	return &sessionStore{limit: limit, lru: list.New(), byID: map[string]*list.Element{}, active: map[string]map[*seq]bool{}}
}

// take removes and returns the session's cache, or nil.
func (s *sessionStore) take(id string) *sessionEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return nil
	}
	s.remove(el)
	return el.Value.(*sessionEntry)
}

func (s *sessionStore) remove(el *list.Element) {
	e := el.Value.(*sessionEntry)
	s.lru.Remove(el)
	delete(s.byID, e.id)
	s.tokens -= e.cache.Len()
}

// start records a running request of a session.
func (s *sessionStore) start(id string, q *seq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[id] == nil {
		s.active[id] = map[*seq]bool{}
	}
	s.active[id][q] = true
}

// finish stores the cache of a request that ran for session id, unless the
// session was released while it ran or the cache alone exceeds the limit.
func (s *sessionStore) finish(id string, q *seq, c Cache, version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep, ok := s.active[id][q]
	delete(s.active[id], q)
	if len(s.active[id]) == 0 {
		delete(s.active, id)
	}
	if !ok || !keep || c == nil || c.Len() > s.limit {
		return
	}
	if el, dup := s.byID[id]; dup {
		s.remove(el)
	}
	s.byID[id] = s.lru.PushFront(&sessionEntry{id: id, cache: c, version: version})
	s.tokens += c.Len()
	for s.tokens > s.limit {
		s.remove(s.lru.Back())
	}
}

// release drops the session's cache and keeps running requests of it from
// storing theirs.
func (s *sessionStore) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byID[id]; ok {
		s.remove(el)
	}
	for q := range s.active[id] {
		s.active[id][q] = false
	}
}

// dropOtherVersions removes caches computed with weights of other
// versions than those named.
func (s *sessionStore) dropOtherVersions(versions ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for el := s.lru.Front(); el != nil; {
		next := el.Next()
		if !slices.Contains(versions, el.Value.(*sessionEntry).version) {
			s.remove(el)
		}
		el = next
	}
}

// stats returns the number of sessions and cached positions.
func (s *sessionStore) stats() (sessions, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len(), s.tokens
}
