package httpclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
)

// fakeServer is a minimal OpenAI-compatible completions server on a
// loopback port. fail, when set, answers a completion instead of the
// normal answer when it returns true (it may write any answer or hijack
// the connection).
type fakeServer struct {
	addr        string
	completions atomic.Int64
	fail        func(w http.ResponseWriter, r *http.Request, n int64) bool

	mu  sync.Mutex
	srv *http.Server
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","owned_by":"vllm","max_model_len":64}]}`)
	case "/v1/completions":
		n := f.completions.Add(1)
		if f.fail != nil && f.fail(w, r, n) {
			return
		}
		fmt.Fprint(w, `{"choices":[{"finish_reason":"length","token_ids":[7],"logprobs":{"tokens":["a"],"token_logprobs":[-1]}}]}`)
	default:
		http.NotFound(w, r)
	}
}

// startFake serves f on 127.0.0.1 (addr "" picks a free port).
func startFake(t *testing.T, f *fakeServer, addr string) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var l net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 5 * time.Second}
	f.mu.Lock()
	f.addr, f.srv = l.Addr().String(), srv
	f.mu.Unlock()
	go srv.Serve(l)
	t.Cleanup(func() { f.stop() })
}

// stop closes the listener and every connection at once.
func (f *fakeServer) stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func openFake(t *testing.T, f *fakeServer, query string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := url.Parse("http://" + f.addr + "/v1?model=m&" + query)
	c, err := open(ctx, u)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*Client)
}

func generate(ctx context.Context, c *Client, seed int64) error {
	_, err := c.Generate(ctx, policy.Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 1, Seed: seed}})
	return err
}

// TestRideOutOutage closes the server's listener and connections for 2.5s
// and listens again on the same port while 32 concurrent calls (each under
// a 20s deadline) keep coming: none fails.
func TestRideOutOutage(t *testing.T) {
	f := &fakeServer{}
	startFake(t, f, "")
	c := openFake(t, f, "retry_budget=10s")
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	var calls atomic.Int64
	stopAt := time.Now().Add(4 * time.Second)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stopAt); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := generate(ctx, c, int64(w*1000+i))
				cancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	addr := f.addr
	f.stop()
	time.Sleep(2500 * time.Millisecond)
	startFake(t, f, addr)
	wg.Wait()
	t.Logf("%d calls across a 2.5s outage, %d failed", calls.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d of %d calls failed across a 2.5s outage; want 0 (first: %v)", failed.Load(), calls.Load(), first.Load())
	}
	if calls.Load() < 64 {
		t.Fatalf("only %d calls made", calls.Load())
	}
}

// TestRetriesWhatMayPass answers the first attempts of each call with a
// 503, a 502, a 504, a reset connection and a connection closed before
// the answer: the call succeeds on the next attempt.
func TestRetriesWhatMayPass(t *testing.T) {
	fails := map[string]func(w http.ResponseWriter){
		"503": func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		"502": func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
		"504": func(w http.ResponseWriter) { w.WriteHeader(http.StatusGatewayTimeout) },
		"reset": func(w http.ResponseWriter) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0) // RST
			conn.Close()
		},
		"eof": func(w http.ResponseWriter) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		},
		"half answer": func(w http.ResponseWriter) {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choices\":")
			buf.Flush()
			conn.Close()
		},
	}
	for name, fail := range fails {
		t.Run(name, func(t *testing.T) {
			f := &fakeServer{fail: func(w http.ResponseWriter, _ *http.Request, n int64) bool {
				if n <= 2 {
					fail(w)
					return true
				}
				return false
			}}
			startFake(t, f, "")
			c := openFake(t, f, "")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := generate(ctx, c, 1); err != nil {
				t.Fatalf("a call failed twice with %s: %v; want it retried", name, err)
			}
			if n := f.completions.Load(); n != 3 {
				t.Errorf("%d attempts, want 3", n)
			}
		})
	}
}

// TestClientErrorsNotRetried answers 400, 401, 404, 422 and 500: one
// attempt each, and the error names the status.
func TestClientErrorsNotRetried(t *testing.T) {
	for _, status := range []int{400, 401, 404, 422, 500} {
		f := &fakeServer{fail: func(w http.ResponseWriter, _ *http.Request, _ int64) bool {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"refused on purpose","type":"invalid_request_error"}}`)
			return true
		}}
		startFake(t, f, "")
		c := openFake(t, f, "")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := generate(ctx, c, 1)
		cancel()
		if !IsStatus(err, status) || !strings.Contains(err.Error(), "refused on purpose") {
			t.Errorf("%d: error %v, want the StatusError with the server's message", status, err)
		}
		if n := f.completions.Load(); n != 1 {
			t.Errorf("%d: %d attempts, want 1 (not retried)", status, n)
		}
	}
}

// TestRetriesStopAtDeadline: a server that always answers 503 is retried
// until the call's deadline and no longer; a Retry-After beyond the
// deadline is not waited for; one within it is.
func TestRetriesStopAtDeadline(t *testing.T) {
	var retryAfter atomic.Value
	retryAfter.Store("")
	var times []time.Time
	var mu sync.Mutex
	f := &fakeServer{fail: func(w http.ResponseWriter, _ *http.Request, _ int64) bool {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if v := retryAfter.Load().(string); v != "" {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}}
	startFake(t, f, "")
	c := openFake(t, f, "max_retries=1000&retry_budget=1h")

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	t0 := time.Now()
	err := generate(ctx, c, 1)
	el := time.Since(t0)
	cancel()
	if !IsStatus(err, http.StatusServiceUnavailable) {
		t.Errorf("error %v, want the last 503", err)
	}
	if el > 1550*time.Millisecond {
		t.Errorf("the call returned after %v, past its 1.5s deadline", el)
	}
	if n := f.completions.Load(); n < 4 {
		t.Errorf("%d attempts within 1.5s; want retries until the deadline", n)
	}

	// Retry-After: 60 does not fit a 2s deadline: one attempt, at once.
	retryAfter.Store("60")
	f.completions.Store(0)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	t0 = time.Now()
	err = generate(ctx, c, 1)
	el = time.Since(t0)
	cancel()
	if !IsStatus(err, http.StatusTooManyRequests) || f.completions.Load() != 1 || el > time.Second {
		t.Errorf("Retry-After 60 under a 2s deadline: %v after %d attempts in %v; want the 429 at once after 1", err, f.completions.Load(), el)
	}

	// Retry-After: 1 fits: the next attempt comes a second later.
	retryAfter.Store("1")
	f.completions.Store(0)
	mu.Lock()
	times = nil
	mu.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 2500*time.Millisecond)
	generate(ctx, c, 1)
	cancel()
	mu.Lock()
	if len(times) < 2 || times[1].Sub(times[0]) < time.Second {
		t.Errorf("Retry-After 1: attempts at %v; want the second a second after the first", times)
	}
	mu.Unlock()

	// max_retries=0: one attempt.
	retryAfter.Store("")
	f.completions.Store(0)
	c0 := openFake(t, f, "max_retries=0")
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := generate(ctx, c0, 1); !IsStatus(err, 503) || f.completions.Load() != 1 {
		t.Errorf("max_retries=0: %v after %d attempts; want the 503 after 1", err, f.completions.Load())
	}
}

// TestUnreachableGivesUp: with no server at all, a call retries within its
// budget and fails naming the server and the cause.
func TestUnreachableGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &Client{base: "http://" + addr + "/v1", root: "http://" + addr, hc: &http.Client{}}
	c.retry.MaxRetries, c.retry.Budget, c.retry.Initial, c.retry.Max = 100, 400*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
	t0 := time.Now()
	_, err = c.Info(context.Background())
	if el := time.Since(t0); el > 2*time.Second || el < 300*time.Millisecond {
		t.Errorf("gave up after %v; want about the 400ms budget", el)
	}
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %v, want one naming %s and the refused connection", err, addr)
	}
	var se *StatusError
	if errors.As(err, &se) {
		t.Errorf("an unreachable server gave a StatusError: %v", err)
	}
}

// A request sent on a kept-alive connection that the server closed as idle
// at that moment was never read: it is retried. net/http reports it only
// by its message, wrapped in a *url.Error.
func TestServerClosedIdleIsTransient(t *testing.T) {
	err := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/completions", Err: errors.New(errServerClosedIdle)}
	if !transient(fmt.Errorf("http policy: %w", err)) {
		t.Errorf("transient(%v) = false, want true", err)
	}
	if transient(&url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/completions", Err: errors.New("http: malformed response")}) {
		t.Error("a malformed answer counted as transient")
	}
}

// TestSilentServerBounded: a server that accepts connections and never
// answers is given up on within remote.MetaTimeout at Open (the model
// list), with an error naming it, instead of waiting for a generation's
// bound (minutes).
func TestSilentServerBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	prev := remote.MetaTimeout
	remote.MetaTimeout = time.Second
	defer func() { remote.MetaTimeout = prev }()
	addr := l.Addr().String()
	t0 := time.Now()
	_, err = policy.Open(context.Background(), "http://"+addr+"/v1?model=m")
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("gave up after %v; want about the 1s bound", el)
	}
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("error %v, want one naming %s and the missing answer", err, addr)
	}
}
