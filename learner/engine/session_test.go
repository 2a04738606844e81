package engine

import (
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
)

func filled(t *testing.T, m *model.Model, n int) *model.KVCache {
	t.Helper()
	c := m.NewKVCache()
	if _, err := m.Extend([]*model.KVCache{c}, [][]int32{make([]int32, n)}, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSessionStoreLRU(t *testing.T) {
	m := peaked(t, tinyConfig(), 1)
	s := newSessionStore(10)
	put := func(id string, n int) {
		q := &seq{}
		s.start(id, q)
		s.finish(id, q, filled(t, m, n), 1)
	}
	put("a", 4)
	put("b", 4)
	if e := s.take("a"); e == nil || e.cache.Len() != 4 {
		t.Fatalf("take(a) = %v, want its 4-token cache", e)
	}
	put("a", 4) // a is now the most recent
	put("c", 4) // 12 > 10: evicts b, the least recent
	if n, tok := s.stats(); n != 2 || tok != 8 {
		t.Fatalf("%d sessions with %d tokens, want 2 with 8", n, tok)
	}
	if s.take("b") != nil {
		t.Error("b was not evicted")
	}
	put("big", 11) // larger than the whole store: not kept
	if s.take("big") != nil {
		t.Error("a cache over the limit was kept")
	}
	// Released while running: not stored.
	q := &seq{}
	s.start("r", q)
	s.release("r")
	s.finish("r", q, filled(t, m, 2), 1)
	if s.take("r") != nil {
		t.Error("a session released while its request ran was stored")
	}
	s.dropOtherVersions(2)
	if n, tok := s.stats(); n != 0 || tok != 0 {
		t.Errorf("after dropping version 1: %d sessions, %d tokens", n, tok)
	}
}
