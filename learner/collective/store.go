package collective

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"time"
)

// Store is a client of the group's store, over one TCP connection; calls
// are serialized. Every call is bounded: waits by their context's deadline
// or the store's default, and the connection by a deadline a little past
// that, so that a store that stops answering fails the call.
type Store struct {
	addr string
	// Default bounds a wait whose context has no deadline.
	Default time.Duration
	// Slack is how long past a wait's own bound the client waits for the
	// store's answer, and the bound of a call that does not wait.
	Slack time.Duration

	mu     sync.Mutex
	conn   net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	broken error
}

// StoreError is a call the store refused or could not answer.
type StoreError struct {
	Addr    string
	Op      string
	Key     string
	Missing []string // keys still absent when a wait timed out
	Err     error
}

func (e *StoreError) Error() string {
	s := fmt.Sprintf("collective: store %s: %s", e.Addr, e.Op)
	if e.Key != "" {
		s += " " + strconv.Quote(e.Key)
	}
	return s + ": " + e.Err.Error()
}

func (e *StoreError) Unwrap() error { return e.Err }

// replySlack is the default Store.Slack.
const replySlack = 5 * time.Second

// DialStore connects to the store at addr, retrying until it answers or
// timeout passes (the store may not be up yet when the other ranks start).
func DialStore(ctx context.Context, addr string, timeout time.Duration) (*Store, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	pause := 50 * time.Millisecond
	var last error
	for {
		left := time.Until(deadline)
		if left <= 0 {
			if last == nil {
				last = context.DeadlineExceeded
			}
			return nil, fmt.Errorf("no answer within %s: %w", timeout, last)
		}
		d := net.Dialer{Timeout: min(left, 5*time.Second)}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			return &Store{addr: addr, Default: 5 * time.Minute, Slack: replySlack, conn: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(pause, time.Until(deadline))):
		}
		pause = min(pause*2, time.Second)
	}
}

// Addr is the store's address.
func (s *Store) Addr() string { return s.addr }

// LocalAddr is this end of the connection to the store: the address of
// this machine the store sees.
func (s *Store) LocalAddr() string { return s.conn.LocalAddr().String() }

// Close closes the connection.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = errors.New("store client closed")
	}
	return s.conn.Close()
}

// waitBound returns the bound of a wait under ctx.
func (s *Store) waitBound(ctx context.Context) (time.Duration, error) {
	return Timeout(ctx, s.Default)
}

// call sends one request and reads its reply. wait is the server-side
// bound of the request (0 for a call that does not wait).
func (s *Store) call(op byte, name string, wait time.Duration, args ...[]byte) (byte, [][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return 0, nil, s.broken
	}
	ms := wait.Milliseconds()
	if ms > math.MaxUint32 {
		ms = math.MaxUint32
	}
	var head [5]byte
	head[0] = op
	binary.BigEndian.PutUint32(head[1:], uint32(ms))
	s.conn.SetDeadline(time.Now().Add(wait + s.Slack))
	err := writeFrame(s.w, head[:], args)
	var status [1]byte
	var vals [][]byte
	if err == nil {
		if _, err = io.ReadFull(s.r, status[:]); err == nil {
			vals, err = readFields(s.r)
		}
	}
	if err != nil {
		// The stream is out of step after a failed exchange: later calls
		// fail with this error instead of reading a stale reply.
		s.broken = fmt.Errorf("the store at %s did not answer %s (rank 0 serves it): %w", s.addr, name, err)
		s.conn.Close()
		return 0, nil, s.broken
	}
	if status[0] == statusError {
		msg := "refused"
		if len(vals) > 0 {
			msg = string(vals[0])
		}
		return statusError, nil, errors.New(msg)
	}
	return status[0], vals, nil
}

// Set stores value under key.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, _, err := s.call(opSet, "set", 0, []byte(key), value); err != nil {
		return &StoreError{Addr: s.addr, Op: "set", Key: key, Err: err}
	}
	return nil
}

// Delete removes key.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, _, err := s.call(opDelete, "delete", 0, []byte(key)); err != nil {
		return &StoreError{Addr: s.addr, Op: "delete", Key: key, Err: err}
	}
	return nil
}

// Get returns key's value, waiting for it to be set within the bound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	bound, err := s.waitBound(ctx)
	if err != nil {
		return nil, err
	}
	st, vals, err := s.call(opGet, "get", bound, []byte(key))
	if err != nil {
		return nil, &StoreError{Addr: s.addr, Op: "get", Key: key, Err: err}
	}
	if st == statusTimeout {
		return nil, &StoreError{Addr: s.addr, Op: "get", Key: key, Missing: []string{key},
			Err: fmt.Errorf("%w: not set within %s", ErrTimeout, bound.Round(time.Millisecond))}
	}
	if len(vals) != 1 {
		return nil, &StoreError{Addr: s.addr, Op: "get", Key: key, Err: errors.New("malformed reply")}
	}
	return vals[0], nil
}

// Wait returns once every key is set, or fails within the bound with a
// *StoreError listing the keys still missing.
func (s *Store) Wait(ctx context.Context, keys ...string) error {
	bound, err := s.waitBound(ctx)
	if err != nil {
		return err
	}
	args := make([][]byte, len(keys))
	for i, k := range keys {
		args[i] = []byte(k)
	}
	st, vals, err := s.call(opWait, "wait", bound, args...)
	if err != nil {
		return &StoreError{Addr: s.addr, Op: "wait", Err: err}
	}
	if st == statusTimeout {
		e := &StoreError{Addr: s.addr, Op: "wait", Err: fmt.Errorf("%w: %d of %d keys not set within %s", ErrTimeout, len(vals), len(keys), bound.Round(time.Millisecond))}
		for _, v := range vals {
			e.Missing = append(e.Missing, string(v))
		}
		return e
	}
	return nil
}

// Add adds delta to the integer under key (0 when unset) and returns the
// sum.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, vals, err := s.call(opAdd, "add", 0, []byte(key), []byte(strconv.FormatInt(delta, 10)))
	if err == nil && len(vals) != 1 {
		err = errors.New("malformed reply")
	}
	if err != nil {
		return 0, &StoreError{Addr: s.addr, Op: "add", Key: key, Err: err}
	}
	return strconv.ParseInt(string(vals[0]), 10, 64)
}
