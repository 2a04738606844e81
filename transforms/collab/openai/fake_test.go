package openai

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Faults the fake server injects.
const (
	faultNone      = "ok"
	fault500       = "500"
	fault429       = "429"
	faultTimeout   = "timeout"
	faultReset     = "reset"
	faultMalformed = "malformed"
	faultEmpty     = "empty"
	fault400       = "400"
)

// fakeLLM is an OpenAI-compatible chat completions server on 127.0.0.1
// that answers in the response shape of vLLM and injects faults.
type fakeLLM struct {
	srv *httptest.Server
	key string

	mu        sync.Mutex
	rng       *rand.Rand
	faultRate float64
	faults    []string // drawn uniformly when a fault is injected
	down      bool     // every request gets a 500
	requests  []chatRequest
	byQuery   map[string][]string // outcome sequence per query id
	counts    map[string]int
}

var queryID = regexp.MustCompile(`q-\d+`)

func newFakeLLM(t *testing.T, key string, faultRate float64, faults ...string) *fakeLLM {
	f := &fakeLLM{key: key, rng: rand.New(rand.NewPCG(1, 2)), faultRate: faultRate, faults: faults,
		byQuery: map[string][]string{}, counts: map[string]int{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.handle))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Listener = l
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) url() string { return f.srv.URL + "/v1" }

func (f *fakeLLM) setDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

func (f *fakeLLM) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeLLM) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"object":"error","message":"not found","code":404}`, http.StatusNotFound)
		return
	}
	if f.key != "" && r.Header.Get("Authorization") != "Bearer "+f.key {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, r.Header.Get("Authorization"))
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 {
		http.Error(w, `{"object":"error","message":"bad request","code":400}`, http.StatusBadRequest)
		return
	}
	id := queryID.FindString(req.Messages[1].Content)
	f.mu.Lock()
	outcome := faultNone
	switch {
	case f.down:
		outcome = fault500
	case f.rng.Float64() < f.faultRate:
		outcome = f.faults[f.rng.IntN(len(f.faults))]
	}
	f.requests = append(f.requests, req)
	f.byQuery[id] = append(f.byQuery[id], outcome)
	f.counts[outcome]++
	f.mu.Unlock()

	switch outcome {
	case fault500:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"object":"error","message":"CUDA error: an illegal memory access","type":"InternalServerError","param":null,"code":500}`)
	case fault429:
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	case fault400:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}`)
	case faultTimeout:
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	case faultReset:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
			conn.Close()
		}
	case faultMalformed:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-9f2","object":"chat.completion","choices":[{"index":0,"message":{"role":"assist`)
	case faultEmpty:
		writeVLLM(w, req, "")
	default:
		writeVLLM(w, req, "answer to "+id)
	}
}

// writeVLLM answers in the shape vLLM's OpenAI server uses (fields as of
// vLLM 0.6-0.8, including usage and logprobs).
func writeVLLM(w http.ResponseWriter, req chatRequest, content string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-b1e0c3a6d4f94e6c","object":"chat.completion","created":1718000000,"model":%q,`+
		`"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":%q,"tool_calls":[]},`+
		`"logprobs":{"content":[{"token":"answer","logprob":-0.01,"bytes":[97,110,115,119,101,114],"top_logprobs":[]}]},`+
		`"finish_reason":"stop","stop_reason":null}],`+
		`"usage":{"prompt_tokens":57,"total_tokens":62,"completion_tokens":5,"prompt_tokens_details":null},"prompt_logprobs":null}`,
		req.Model, content)
}
