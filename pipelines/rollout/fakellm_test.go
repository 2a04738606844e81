package rollout

// A flaky OpenAI-compatible chat server for the fault tests: it answers
// like the built-in demo collaborators, in vLLM's response shape (usage,
// logprobs), behind one path per agent (/verify/v1, /knowledge/v1,
// /reason/v1), and fails a fixed share of requests with HTTP 500, a
// timeout, a reset connection, malformed JSON or an empty answer. Whether a
// request fails, and how, is decided from its seed, so a retried request
// fails again and a re-run sees the same faults.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/faultinject"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
)

var faultKinds = []string{"500", "timeout", "reset", "malformed", "empty"}

type fakeLLM struct {
	srv      *httptest.Server
	task     *demo.Task
	rate     float64
	stall    time.Duration // how long a "timeout" fault stalls
	delay    time.Duration // added to every answer (the benchmark's simulated model time)
	requests atomic.Int64
	faults   [5]atomic.Int64
}

func newFakeLLM(t *testing.T, rate float64, stall time.Duration) *fakeLLM {
	task, err := demo.New(demo.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLLM{task: task, rate: rate, stall: stall}
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

func (f *fakeLLM) endpoint(agent string) string { return f.srv.URL + "/" + agent + "/v1" }

type fakeRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Seed int64 `json:"seed"`
}

func (f *fakeLLM) handle(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	agent, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	var req fakeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	seed := uint64(req.Seed)
	if collab.Uniform(seed, 3) < f.rate {
		k := collab.IntN(seed, 4, len(faultKinds))
		f.faults[k].Add(1)
		switch kind := faultKinds[k]; kind {
		case "timeout":
			faultinject.Fail(w, r, faultinject.Stall, f.stall)
		case "malformed":
			faultinject.Fail(w, r, faultinject.Malformed, 0)
		case "500", "reset":
			faultinject.Fail(w, r, kind, 0)
		case "empty":
			writeChat(w, req, "")
		}
		return
	}
	query := req.Messages[len(req.Messages)-1].Content
	noisy := strings.HasPrefix(query, "NOISY ")
	query = strings.TrimPrefix(query, "NOISY ")
	var answer string
	switch agent {
	case "knowledge":
		v, ok := f.task.Lookup(strings.ToLower(strings.TrimSpace(query)))
		switch {
		case !ok:
			answer = demo.Unknown
		case noisy:
			answer = strconv.Itoa(100 + (v-100+1+collab.IntN(seed, 5, 898))%900)
		default:
			answer = strconv.Itoa(v)
		}
	case "reason":
		a, _ := demo.Reasoner{}.Answer(context.Background(), collab.Query{Text: query})
		answer = a.Text
	case "verify":
		answer = demo.NewVerifier(f.task).Check(query)
	default:
		http.Error(w, `{"error":{"message":"no such model"}}`, http.StatusNotFound)
		return
	}
	writeChat(w, req, answer)
}

// writeChat answers in the shape vLLM's OpenAI server uses.
func writeChat(w http.ResponseWriter, req fakeRequest, content string) {
	w.Header().Set("Content-Type", "application/json")
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Content) / 4
	}
	fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1767225600,"model":%q,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],`+
		`"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null},"prompt_logprobs":null}`,
		req.Seed, req.Model, content, prompt, prompt+len(content), len(content))
}
