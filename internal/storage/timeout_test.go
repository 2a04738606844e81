package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	// A port below Linux's ephemeral range (32768-60999): the servers other
	// tests start on port 0 never take it while this test runs, as they
	// could take a freed ephemeral port and answer in its place.
	for p := 29000; p < 29100; p++ {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close() // free to bind, so nothing listens there
			return addr
		}
	}
	t.Fatal("no closed port in 127.0.0.1:29000-29099")
	return ""
}

// silentServer accepts connections and never answers: a store behind a
// network that swallows requests.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Every remote operation on a store that cannot be reached ends within its
// bound with an error naming the store's address and the cause, instead of
// the client library retrying for as long as the context lives (minutes:
// without a deadline, forever).
func TestUnreachableStoreFailsWithinTheBound(t *testing.T) {
	const bound = time.Second
	prev := Timeout()
	SetTimeout(bound)
	t.Cleanup(func() { SetTimeout(prev) })
	ops := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"ReadFile", func(ctx context.Context) error { _, err := ReadFile(ctx, "gs://b/run/run.yaml"); return err }},
		{"Exists", func(ctx context.Context) error {
			_, err := Exists(ctx, "gs://b/run/step-000001/_MANIFEST.json")
			return err
		}},
		{"List", func(ctx context.Context) error { _, err := List(ctx, "gs://b/run/step-**"); return err }},
		{"WriteAtomic", func(ctx context.Context) error { return WriteAtomic(ctx, "gs://b/run/x.json", []byte("{}")) }},
		{"Remove", func(ctx context.Context) error { return Remove(ctx, "gs://b/run/x.json") }},
		{"ReadGen", func(ctx context.Context) error { _, _, err := ReadGen(ctx, "gs://b/run/_LEASE.json"); return err }},
		{"CreateExclusive", func(ctx context.Context) error { return CreateExclusive(ctx, "gs://b/run/_LEASE.json", []byte("{}")) }},
	}
	for _, store := range []struct {
		name, addr, cause string
	}{
		{"closed port", closedPort(t), "connection refused"},
		{"silent server", silentServer(t), ""},
	} {
		t.Setenv("STORAGE_EMULATOR_HOST", store.addr)
		for _, op := range ops {
			t.Run(store.name+"/"+op.name, func(t *testing.T) {
				errc := make(chan error, 1)
				start := time.Now()
				go func() { errc <- op.run(context.Background()) }()
				var err error
				select {
				case err = <-errc:
				case <-time.After(20 * bound):
					t.Fatalf("still waiting after %s for %s (bound %s)", 20*bound, store.addr, bound)
				}
				took := time.Since(start)
				if err == nil {
					t.Fatalf("no error from an unreachable store at %s", store.addr)
				}
				msg := err.Error()
				if !strings.Contains(msg, store.addr) || !strings.Contains(msg, store.cause) {
					t.Fatalf("error %q does not name the address %s and the cause %q", msg, store.addr, store.cause)
				}
				// Requests the client library retries (reads, and writes it
				// knows to be safe to repeat) end at the bound; the others
				// fail at the first refusal, which names the address.
				var te *TimeoutError
				if errors.As(err, &te) {
					if !strings.Contains(msg, TimeoutEnv) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("timeout error %q does not name %s or is not a context.DeadlineExceeded", msg, TimeoutEnv)
					}
				} else if store.cause == "" {
					t.Fatalf("error %v (%T) from a store that never answers, want a *TimeoutError", err, err)
				}
				// The bound is per wait; an operation makes one or two.
				if took > 10*bound {
					t.Errorf("took %s, bound %s", took, bound)
				}
			})
		}
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, " 2m ": 2 * time.Minute, "0": 0} {
		if got, err := ParseTimeout(in); err != nil || got != want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1s", "soon"} {
		if _, err := ParseTimeout(in); err == nil {
			t.Errorf("ParseTimeout(%q) accepted", in)
		}
	}
}
