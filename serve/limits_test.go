package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/schemas/aipov1"
)

// peakHeap runs f and returns the most the in-use heap grew above its
// level before f, sampled every millisecond while f runs.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	runtime.ReadMemStats(&ms)
	return max(peak, ms.HeapInuse) - base
}

// postRaw sends a JSON body as it is and returns the status, headers and
// the decoded error (if the body is one).
func postRaw(t *testing.T, url string, body []byte) (int, http.Header, errorBody) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e errorBody
	json.Unmarshal(out, &e)
	return resp.StatusCode, resp.Header, e
}

// TestLongPromptBoundedMemory sends a 14 MB prompt, which the server used
// to tokenize whole (over 600 MB of heap) before it found that the prompt
// cannot fit the 128-token context. With the default body limit it is
// refused before it is read; with a limit raised above it, it is refused
// from its length before it is tokenized. Either way the heap grows by
// less than 100 MB, and the error names the limit and how to change it.
func TestLongPromptBoundedMemory(t *testing.T) {
	const limit = 100 << 20
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 14<<20/45+1)[:14<<20]
	completion, err := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 4})
	if err != nil {
		t.Fatal(err)
	}
	chat, err := json.Marshal(map[string]any{"model": "tiny", "messages": []any{map[string]string{"role": "user", "content": prompt}}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("default body limit", func(t *testing.T) {
		r := start(t, Options{})
		want := defaultBodyBytes(128)
		for _, c := range []struct {
			path string
			body []byte
		}{{"/v1/completions", completion}, {"/v1/chat/completions", chat}} {
			var st int
			var e errorBody
			grew := peakHeap(func() { st, _, e = postRaw(t, "http://"+r.httpAddr+c.path, c.body) })
			if st != http.StatusRequestEntityTooLarge || e.Error.Code == nil || *e.Error.Code != "body_too_large" ||
				!strings.Contains(e.Error.Message, fmt.Sprint(want)) || !strings.Contains(e.Error.Message, "--max-body-bytes") || !strings.Contains(e.Error.Message, "128-token context") {
				t.Errorf("POST %s of %d bytes: %d %+v; want 413 body_too_large naming the limit %d, how it follows from the context and --max-body-bytes", c.path, len(c.body), st, e.Error, want)
			}
			if grew > limit {
				t.Errorf("POST %s of %d bytes grew the heap by %d MB, want under %d MB", c.path, len(c.body), grew>>20, limit>>20)
			}
			t.Logf("POST %s, %d MB: 413, heap +%d MB", c.path, len(c.body)>>20, grew>>20)
		}
		// Without a Content-Length (chunked), the body is read up to the
		// limit and refused there.
		var st int
		var out []byte
		grew := peakHeap(func() {
			resp, err := http.Post("http://"+r.httpAddr+"/v1/completions", "application/json", io.MultiReader(bytes.NewReader(completion)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			st = resp.StatusCode
			out, _ = io.ReadAll(resp.Body)
		})
		if st != http.StatusRequestEntityTooLarge || !strings.Contains(string(out), fmt.Sprint(want)) || !strings.Contains(string(out), "--max-body-bytes") || grew > limit {
			t.Errorf("chunked POST of %d bytes: %d %s, heap +%d MB; want 413 naming the limit %d and --max-body-bytes, under %d MB", len(completion), st, out, grew>>20, want, limit>>20)
		}
	})

	t.Run("raised body limit", func(t *testing.T) {
		r := start(t, Options{MaxBodyBytes: 64 << 20})
		for _, c := range []struct {
			path, param string
			body        []byte
		}{{"/v1/completions", "prompt", completion}, {"/v1/chat/completions", "messages", chat}} {
			var st int
			var e errorBody
			grew := peakHeap(func() { st, _, e = postRaw(t, "http://"+r.httpAddr+c.path, c.body) })
			if st != http.StatusBadRequest || e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" || e.Error.Param == nil || *e.Error.Param != c.param ||
				!strings.Contains(e.Error.Message, fmt.Sprintf("%d bytes", len(prompt))) || !strings.Contains(e.Error.Message, "context is 128 tokens") {
				t.Errorf("POST %s with a %d-byte prompt: %d %+v; want 400 context_length_exceeded about %s naming its bytes and the context of 128 tokens", c.path, len(prompt), st, e.Error, c.param)
			}
			if grew > limit {
				t.Errorf("POST %s with a %d-byte prompt grew the heap by %d MB, want under %d MB", c.path, len(prompt), grew>>20, limit>>20)
			}
			t.Logf("POST %s, %d MB prompt: 400, heap +%d MB", c.path, len(prompt)>>20, grew>>20)
		}
		// A prompt that the length bound lets through is still counted:
		// 200 bytes of special-parsed text may be as few as 17 tokens.
		st, _, e := postRaw(t, "http://"+r.httpAddr+"/v1/completions", []byte(`{"prompt":"`+strings.Repeat("z", 200)+`"}`))
		if st != 400 || e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "200 tokens") {
			t.Errorf("200-byte prompt: %d %+v; want context_length_exceeded counting 200 tokens", st, e.Error)
		}
	})
}

// TestBodyLimitGRPC checks that a gRPC message over the body limit is
// refused.
func TestBodyLimitGRPC(t *testing.T) {
	r := start(t, Options{MaxBodyBytes: 4096})
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := aipov1.NewPolicyClient(conn)
	ctx := ctxT(t, 30*time.Second)
	if _, err := rpc.Tokenize(ctx, &aipov1.TokenizeRequest{Text: strings.Repeat("x", 5000)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Tokenize of 5000 bytes with a 4096-byte limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := rpc.Tokenize(ctx, &aipov1.TokenizeRequest{Text: strings.Repeat("x", 3000)}); err != nil {
		t.Errorf("Tokenize of 3000 bytes with a 4096-byte limit: %v", err)
	}
}

// dialHTTP opens a raw connection to the HTTP listener, with a deadline
// that bounds the test.
func dialHTTP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reads c until the server closes it and fails the test if
// that does not happen before c's deadline.
func closedWithin(t *testing.T, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
}

// TestSlowBodyTimesOut sends a body at one byte every 300 ms and checks
// that the server answers 408 and closes the connection once the body
// timeout (1 s) has passed, instead of waiting for it indefinitely.
func TestSlowBodyTimesOut(t *testing.T) {
	r := start(t, Options{BodyTimeout: time.Second})
	c := dialHTTP(t, r.httpAddr)
	begin := time.Now()
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response to a slow body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(begin); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "--body-timeout") || took < time.Second {
		t.Errorf("slow body: %d %s after %s; want 408 naming --body-timeout after the 1s timeout", resp.StatusCode, body, took)
	}
	closedWithin(t, c, br, "slow body")
}

// TestIdleConnectionClosed checks that a keep-alive connection without a
// next request is closed after the idle timeout.
func TestIdleConnectionClosed(t *testing.T) {
	r := start(t, Options{IdleTimeout: time.Second})
	c := dialHTTP(t, r.httpAddr)
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("GET /health: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	idle := time.Now()
	closedWithin(t, c, br, "idle keep-alive connection")
	if took := time.Since(idle); took < 900*time.Millisecond {
		t.Errorf("the idle connection was closed after %s, before the 1s idle timeout", took)
	}
}

// TestConnectionCap holds the two connections the server takes and checks
// that a third waits to be served until one of them closes.
func TestConnectionCap(t *testing.T) {
	r := start(t, Options{MaxConns: 2})
	var held []net.Conn
	for range 2 {
		c := dialHTTP(t, r.httpAddr)
		if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
		resp.Body.Close()
		held = append(held, c)
	}
	got := make(chan error, 1)
	go func() {
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
		resp, err := cl.Get("http://" + r.httpAddr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a third connection was served while two were held (MaxConns 2): %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	held[0].Close()
	if err := <-got; err != nil {
		t.Fatalf("the waiting connection was not served once a slot freed: %v", err)
	}
}

// TestClientRequestCap holds the one generation request a client may have
// (a completion whose body is still arriving) and checks that a second
// one, a stream, gets 429 with Retry-After over HTTP and
// RESOURCE_EXHAUSTED over gRPC, and that the client gets through once the
// first has ended. The stream then carries the policy-version header.
func TestClientRequestCap(t *testing.T) {
	r := start(t, Options{MaxClientRequests: 1, BodyTimeout: 30 * time.Second})
	base := "http://" + r.httpAddr
	c := dialHTTP(t, r.httpAddr)
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	waitInFlight := func(n int) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); r.srv.clients.inFlight("127.0.0.1") != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the client has %d requests in flight, want %d", r.srv.clients.inFlight("127.0.0.1"), n)
			}
		}
	}
	waitInFlight(1)
	stream := map[string]any{"prompt": []int{1, 2}, "max_tokens": 4, "stream": true}
	st, h, body := post(t, base+"/v1/completions", stream)
	var e errorBody
	json.Unmarshal(body, &e)
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "too_many_client_requests" || !strings.Contains(e.Error.Message, "--max-client-requests") {
		t.Errorf("second request of a client with a cap of 1: %d Retry-After %q %s; want 429 with Retry-After naming --max-client-requests", st, h.Get("Retry-After"), body)
	}
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gs, err := aipov1.NewPolicyClient(conn).Generate(ctxT(t, 30*time.Second), &aipov1.GenerateRequest{Prefix: []int32{1, 2}, Params: &aipov1.SampleParams{MaxTokens: 2}})
	if err == nil {
		_, err = gs.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-client-requests") {
		t.Errorf("gRPC Generate beside a held HTTP request with a cap of 1: %v, want RESOURCE_EXHAUSTED", err)
	}
	c.Close()
	waitInFlight(0)
	b, _ := json.Marshal(stream)
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	all, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(all), "[DONE]") || resp.Header.Get(PolicyVersionHeader) != "3" {
		t.Errorf("stream once the first request ended: %d %s=%q %s; want 200 of policy version 3", resp.StatusCode, PolicyVersionHeader, resp.Header.Get(PolicyVersionHeader), all)
	}
}

// TestStreamPolicyVersionHeader checks that completion and chat streams
// carry X-Aipo-Policy-Version as the other responses do.
func TestStreamPolicyVersionHeader(t *testing.T) {
	r := start(t, Options{})
	base := "http://" + r.httpAddr
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/completions", map[string]any{"prompt": []int{1, 2}, "max_tokens": 3, "stream": true}},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]string{"role": "user", "content": "hi"}}, "max_tokens": 3, "stream": true}},
		{"/v1/completions", map[string]any{"prompt": []int{1, 2}, "max_tokens": 3}},
	} {
		st, h, body := post(t, base+c.path, c.body)
		if st != 200 || h.Get(PolicyVersionHeader) != "3" {
			t.Errorf("POST %s stream=%v: %d %s=%q; want 200 with policy version 3 (%.200s)", c.path, c.body["stream"], st, PolicyVersionHeader, h.Get(PolicyVersionHeader), body)
		}
	}
}
