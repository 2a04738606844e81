package collective

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Server is the key-value store rank 0 serves to the group: set, get, wait
// and add on keys, plus each rank's check-in, heartbeats and clean exit,
// which it times by its own clock so that ranks' clocks need not agree.
type Server struct {
	ln   net.Listener
	size int

	mu      sync.Mutex
	kv      map[string][]byte
	changed chan struct{} // closed and replaced on every change
	ranks   []rankInfo
	conns   map[net.Conn]struct{}
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

type rankInfo struct {
	hello bool
	beat  time.Time
	gone  time.Time
	left  bool
}

// healthEntry is one rank in an opHealth reply.
type healthEntry struct {
	Rank      int    `json:"rank"`
	SinceBeat int64  `json:"since_beat_ms"` // -1: never
	Gone      bool   `json:"gone"`
	GoneFor   int64  `json:"gone_ms"`
	Left      bool   `json:"left"`
	Failed    string `json:"failed,omitempty"`
}

// Serve starts a store for a group of size ranks on ln and returns at
// once; Close stops it.
func Serve(ln net.Listener, size int) *Server {
	s := &Server{ln: ln, size: size, kv: map[string][]byte{}, changed: make(chan struct{}),
		ranks: make([]rankInfo, size), conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the address the store listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops accepting, closes every connection and waits for the
// handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve answers one connection's requests until it closes. A connection
// bound to a rank (opHello) that closes before opLeave marks the rank gone.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	bound := -1
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		if bound >= 0 && !s.ranks[bound].left && !s.closed {
			s.ranks[bound].gone = time.Now()
		}
		s.mu.Unlock()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		args, err := readFields(r)
		if err != nil {
			return
		}
		op, timeout := head[0], time.Duration(binary.BigEndian.Uint32(head[1:]))*time.Millisecond
		status, vals := s.handle(op, timeout, args, &bound)
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := writeFrame(w, []byte{status}, vals); err != nil {
			return
		}
	}
}

func fail(format string, args ...any) (byte, [][]byte) {
	return statusError, [][]byte{[]byte(fmt.Sprintf(format, args...))}
}

// handle answers one request: op with its arguments, timeout bounding a
// get or wait. bound is the rank the connection checked in as (-1: none).
func (s *Server) handle(op byte, timeout time.Duration, args [][]byte, bound *int) (byte, [][]byte) {
	switch op {
	case opSet:
		return s.set(args)
	case opDelete:
		return s.remove(args)
	case opGet, opWait:
		return s.get(op, timeout, args)
	case opAdd:
		return s.add(args)
	case opHello:
		return s.hello(args, bound)
	case opBeat, opLeave:
		return s.rankEvent(op, *bound)
	case opHealth:
		return s.health()
	}
	return fail("unknown operation %d", op)
}

// set stores a value under a key.
func (s *Server) set(args [][]byte) (byte, [][]byte) {
	if len(args) != 2 {
		return fail("set takes a key and a value")
	}
	s.mu.Lock()
	s.kv[string(args[0])] = args[1]
	s.notifyLocked()
	s.mu.Unlock()
	return statusOK, nil
}

// remove deletes a key.
func (s *Server) remove(args [][]byte) (byte, [][]byte) {
	if len(args) != 1 {
		return fail("delete takes a key")
	}
	s.mu.Lock()
	delete(s.kv, string(args[0]))
	s.mu.Unlock()
	return statusOK, nil
}

// get waits up to timeout for the keys in args to be set (opWait) and
// returns the value of its one key (opGet); at the timeout it returns the
// keys still missing.
func (s *Server) get(op byte, timeout time.Duration, args [][]byte) (byte, [][]byte) {
	if op == opGet && len(args) != 1 {
		return fail("get takes a key")
	}
	missing := s.wait(args, timeout)
	if len(missing) > 0 {
		return statusTimeout, missing
	}
	if op == opGet {
		s.mu.Lock()
		v := s.kv[string(args[0])]
		s.mu.Unlock()
		return statusOK, [][]byte{v}
	}
	return statusOK, nil
}

// add adds an integer delta to a key's integer value (absent: 0) and
// returns the sum.
func (s *Server) add(args [][]byte) (byte, [][]byte) {
	if len(args) != 2 {
		return fail("add takes a key and a delta")
	}
	d, err := strconv.ParseInt(string(args[1]), 10, 64)
	if err != nil {
		return fail("add: delta %q is not an integer", args[1])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := int64(0)
	if v, ok := s.kv[string(args[0])]; ok {
		if cur, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return fail("add: key %q holds %q, not an integer", args[0], v)
		}
	}
	cur += d
	v := []byte(strconv.FormatInt(cur, 10))
	s.kv[string(args[0])] = v
	s.notifyLocked()
	return statusOK, [][]byte{v}
}

// rankEvent records a heartbeat (opBeat) or the clean exit (opLeave) of
// the rank the connection checked in as (bound, -1: none).
func (s *Server) rankEvent(op byte, bound int) (byte, [][]byte) {
	if bound < 0 {
		return fail("this connection has not said which rank it is")
	}
	s.mu.Lock()
	if op == opBeat {
		s.ranks[bound].beat = time.Now()
	} else {
		s.ranks[bound].left = true
	}
	s.mu.Unlock()
	return statusOK, nil
}

// health reports every rank's state, as JSON healthEntry values, timed by
// the store's clock.
func (s *Server) health() (byte, [][]byte) {
	s.mu.Lock()
	now := time.Now()
	out := make([]healthEntry, s.size)
	for i, ri := range s.ranks {
		e := healthEntry{Rank: i, SinceBeat: -1, Left: ri.left, Failed: string(s.kv[failedKey(i)])}
		if ri.hello {
			e.SinceBeat = now.Sub(ri.beat).Milliseconds()
		}
		if !ri.gone.IsZero() {
			e.Gone, e.GoneFor = true, now.Sub(ri.gone).Milliseconds()
		}
		out[i] = e
	}
	s.mu.Unlock()
	b, _ := json.Marshal(out)
	return statusOK, [][]byte{b}
}

// hello checks in a rank: its world size must be the store's, and no other
// live process may hold its rank.
func (s *Server) hello(args [][]byte, bound *int) (byte, [][]byte) {
	if len(args) != 2 {
		return fail("hello takes a rank and a world size")
	}
	rank, err1 := strconv.Atoi(string(args[0]))
	size, err2 := strconv.Atoi(string(args[1]))
	if err1 != nil || err2 != nil {
		return fail("hello: rank %q or world size %q is not an integer", args[0], args[1])
	}
	if size != s.size {
		return fail("WORLD_SIZE=%d on rank %d, but rank 0's store holds WORLD_SIZE=%d: start every rank with the same WORLD_SIZE", size, rank, s.size)
	}
	if rank < 0 || rank >= s.size {
		return fail("RANK=%d is outside [0, %d)", rank, s.size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ri := &s.ranks[rank]
	if ri.hello && ri.gone.IsZero() && !ri.left {
		return fail("RANK=%d is already checked in by another process: give each process a distinct RANK", rank)
	}
	*ri = rankInfo{hello: true, beat: time.Now()}
	*bound = rank
	s.kv[arrivedKey(rank)] = []byte("1")
	s.notifyLocked()
	return statusOK, nil
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait blocks until every key exists or timeout passes, and returns the
// keys still missing.
func (s *Server) wait(keys [][]byte, timeout time.Duration) [][]byte {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		var missing [][]byte
		for _, k := range keys {
			if _, ok := s.kv[string(k)]; !ok {
				missing = append(missing, k)
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-t.C:
			return missing
		case <-s.done:
			return missing
		}
	}
}

func arrivedKey(rank int) string { return "dist/arrived/" + strconv.Itoa(rank) }
func failedKey(rank int) string  { return "dist/failed/" + strconv.Itoa(rank) }
