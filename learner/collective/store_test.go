package collective

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func serveTest(t *testing.T, size int) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, size)
	t.Cleanup(func() { s.Close() })
	return s
}

func dialTest(t *testing.T, s *Server) *Store {
	t.Helper()
	c, err := DialStore(context.Background(), s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStoreSetGetWaitAdd(t *testing.T) {
	s := serveTest(t, 1)
	a, b := dialTest(t, s), dialTest(t, s)
	ctx := context.Background()
	if err := a.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("get: %q, %v", v, err)
	}
	// A get waits for a key set later by another client.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		a.Set(ctx, "later", []byte("x"))
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := b.Get(wctx, "later"); err != nil || string(v) != "x" {
		t.Fatalf("get later: %q, %v", v, err)
	}
	wg.Wait()
	for want := int64(1); want <= 3; want++ {
		if n, err := a.Add(ctx, "n", 1); err != nil || n != want {
			t.Fatalf("add: %d, %v", n, err)
		}
	}
	if n, err := b.Add(ctx, "n", -5); err != nil || n != -2 {
		t.Fatalf("add -5: %d, %v", n, err)
	}
	// Empty and large values.
	if err := a.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("empty: %q, %v", v, err)
	}
	big := make([]byte, 8<<20)
	big[len(big)-1] = 7
	if err := a.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "big"); err != nil || len(v) != len(big) || v[len(v)-1] != 7 {
		t.Fatalf("big: %d bytes, %v", len(v), err)
	}
}

func TestStoreWaitIsBounded(t *testing.T) {
	s := serveTest(t, 1)
	c := dialTest(t, s)
	ctx := context.Background()
	c.Set(ctx, "a", []byte("1"))
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Wait(wctx, "a", "b", "c")
	var se *StoreError
	if !errors.As(err, &se) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want a timed-out *StoreError", err)
	}
	if strings.Join(se.Missing, ",") != "b,c" {
		t.Fatalf("missing %v, want [b c]", se.Missing)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 3*time.Second {
		t.Fatalf("wait took %s for a 300 ms bound", took)
	}
	// The connection still works after a timed-out wait.
	if _, err := c.Add(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
}

func TestStoreThatStopsAnsweringFailsTheCall(t *testing.T) {
	// A listener that accepts and never answers stands for a stalled rank 0.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c, err := DialStore(context.Background(), ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Slack = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "rank 0 serves it") {
		t.Fatalf("got %v, want an error saying rank 0 serves the store", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the call took %s", took)
	}
}

func TestDialStoreGivesUp(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err := DialStore(context.Background(), addr, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("got %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s for a 500 ms bound", took)
	}
}
