package weightsync

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// SGLang does not run on these machines (its PyPI builds need CUDA; see
// docs/operators.md): the server below implements exactly the contract
// SGLang documents and implements, as cited beside the client (sglang.go):
//
//   - SGLang v0.5: https://docs.sglang.io/basic_usage/native_api.html
//     ("Update Weights From Disk", "Get Model Info"), source
//     python/sglang/srt/entrypoints/http_server.py of
//     https://github.com/sgl-project/sglang (update_weights_from_disk,
//     get_model_info) and UpdateWeightFromDiskReqInput in
//     python/sglang/srt/managers/io_struct.py.
//
// vLLM's push runs against a real vLLM in cmd/aipo's vLLM tests.

// sglangServer is SGLang's native weight-update API over a model directory
// that must exist (SGLang fails to find weights otherwise).
type sglangServer struct {
	mu            sync.Mutex
	modelPath     string
	weightVersion string
	updates       int
	// stuck, when set, keeps reporting the old model after a success (a
	// data-parallel rank that did not take the update).
	stuck bool
}

func (s *sglangServer) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /update_weights_from_disk", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("update_weights_from_disk sent with Content-Type %q", ct)
		}
		// UpdateWeightFromDiskReqInput: model_path (required), load_format,
		// abort_all_requests, weight_version, is_async, torch_empty_cache,
		// keep_pause, recapture_cuda_graph, token_step, flush_cache.
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		known := map[string]bool{"model_path": true, "load_format": true, "abort_all_requests": true, "weight_version": true, "is_async": true,
			"torch_empty_cache": true, "keep_pause": true, "recapture_cuda_graph": true, "token_step": true, "flush_cache": true}
		for k := range req {
			if !known[k] {
				t.Errorf("update_weights_from_disk sent field %q, which SGLang does not take", k)
			}
		}
		path, ok := req["model_path"].(string)
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"object":"error","message":"model_path: field required","type":"Bad Request","param":null,"code":400}`)
			return
		}
		version, _ := req["weight_version"].(string)
		w.Header().Set("Content-Type", "application/json")
		if _, err := os.Stat(filepath.Join(path, "model.safetensors")); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"success":false,"message":"Failed to get weights iterator: %s (repository not found).","num_paused_requests":0}`, path)
			return
		}
		s.mu.Lock()
		s.updates++
		msg := "Succeeded to update model weights."
		if !s.stuck {
			s.modelPath = path
			if version != "" {
				s.weightVersion = version
				msg += " Weight version updated to " + version + "."
			}
		}
		s.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"success": true, "message": msg, "num_paused_requests": 0})
	})
	mux.HandleFunc("GET /get_model_info", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"model_path": s.modelPath, "tokenizer_path": s.modelPath, "is_generation": true,
			"preferred_sampling_params": nil, "weight_version": s.weightVersion, "has_image_understanding": false, "has_audio_understanding": false})
	})
	return mux
}

// checkpointDir is a directory holding a model.safetensors.
func checkpointDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "model.safetensors"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func open(t *testing.T, kind string, endpoints []string, o Options) *Group {
	t.Helper()
	g, err := Open(context.Background(), kind, endpoints, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// Two SGLang replicas are updated together and each is checked through its
// model info; a failed update names the replica and SGLang's message; a
// replica that claims success but still serves the old model is caught.
func TestSGLangPush(t *testing.T) {
	ctx := context.Background()
	a, b := &sglangServer{weightVersion: "default"}, &sglangServer{weightVersion: "default"}
	sa, sb := httptest.NewServer(a.handler(t)), httptest.NewServer(b.handler(t))
	defer sa.Close()
	defer sb.Close()
	g := open(t, servers.SGLang, []string{sa.URL, sb.URL}, Options{Timeout: 5 * time.Second, LoadFormat: "safetensors"})
	ck := Checkpoint{Dir: checkpointDir(t, "step-000003"), Version: 3}
	if err := g.Push(ctx, ck); err != nil {
		t.Fatal(err)
	}
	for i, s := range []*sglangServer{a, b} {
		if s.modelPath != ck.Dir || s.weightVersion != "3" || s.updates != 1 {
			t.Errorf("replica %d serves %q version %q after %d updates, want %q version 3", i, s.modelPath, s.weightVersion, s.updates, ck.Dir)
		}
	}
	missing := Checkpoint{Dir: filepath.Join(t.TempDir(), "step-000004"), Version: 4}
	err := g.Push(ctx, missing)
	if err == nil || !strings.Contains(err.Error(), "2 of 2 replicas failed") || !strings.Contains(err.Error(), sa.URL) || !strings.Contains(err.Error(), sb.URL) ||
		!strings.Contains(err.Error(), "Failed to get weights iterator") {
		t.Errorf("a checkpoint the servers cannot read: %v", err)
	}
	if a.modelPath != ck.Dir {
		t.Errorf("a failed update changed the served model to %q", a.modelPath)
	}
	b.stuck = true
	err = g.Push(ctx, Checkpoint{Dir: checkpointDir(t, "step-000005"), Version: 5})
	if err == nil || strings.Contains(err.Error(), sa.URL) || !strings.Contains(err.Error(), sb.URL) || !strings.Contains(err.Error(), `weight_version "3"`) {
		t.Errorf("a replica that still serves version 3: %v", err)
	}
}

// A replica that does not answer fails the push within the timeout, named;
// the other replica's push is not held up past it either.
func TestPushBounded(t *testing.T) {
	ctx := context.Background()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer func() {
		close(hang) // first: Close waits for the handlers
		slow.Close()
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	ck := Checkpoint{Dir: checkpointDir(t, "step-000001"), Version: 1}
	for _, tc := range []struct {
		kind, endpoint string
	}{
		{servers.SGLang, slow.URL}, {servers.VLLM, slow.URL}, {servers.SGLang, closed}, {servers.VLLM, closed},
		{servers.Aipo, "grpc://" + l.Addr().String()},
	} {
		g := open(t, tc.kind, []string{tc.endpoint}, Options{Timeout: 700 * time.Millisecond})
		start := time.Now()
		err := g.Push(ctx, ck)
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), tc.endpoint[strings.Index(tc.endpoint, "//")+2:]) || !strings.Contains(err.Error(), "policy.sync.timeout 700ms") {
			t.Errorf("%s at %s: %v", tc.kind, tc.endpoint, err)
		}
		if took > 3*time.Second {
			t.Errorf("%s at %s: the push took %v, past its 700ms timeout", tc.kind, tc.endpoint, took)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct{ kind, endpoint, want string }{
		{servers.SGLang, "http://127.0.0.1:1/v1", "has a path"},
		{servers.VLLM, "grpc://127.0.0.1:1", "want http://host:port"},
		{servers.VLLM, "http://127.0.0.1:1?model=x", `unknown query parameter "model"`},
		{servers.SGLang, "http://127.0.0.1:1?token_env=AIPO_SURELY_UNSET_VAR", "AIPO_SURELY_UNSET_VAR"},
		{servers.Aipo, "http://127.0.0.1:1", "not a gRPC endpoint"},
		{"triton", "http://127.0.0.1:1", `kind "triton" is unknown: use none (the default: nobody is told), aipo (aipo serve's Reload RPC), sglang`},
		{KindNone, "http://127.0.0.1:1", "kind none tells no server"},
	} {
		_, err := Open(context.Background(), tc.kind, []string{tc.endpoint}, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s, %s) = %v, want an error with %q", tc.kind, tc.endpoint, err, tc.want)
		}
	}
}

// The bearer token of token_env travels in the Authorization header and
// never into an error.
func TestPushSendsToken(t *testing.T) {
	t.Setenv("AIPO_SYNC_TEST_TOKEN", "s3cret-token")
	var got string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"Unauthorized"}`)
	}))
	defer s.Close()
	g := open(t, servers.VLLM, []string{s.URL + "?token_env=AIPO_SYNC_TEST_TOKEN"}, Options{Timeout: 2 * time.Second})
	err := g.Push(context.Background(), Checkpoint{Dir: "/x", Version: 1})
	if got != "Bearer s3cret-token" {
		t.Errorf("Authorization %q", got)
	}
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "401") {
		t.Errorf("refused push: %v", err)
	}
}

// Stale names each replica that no longer serves the version pushed (one
// restarted on its startup weights, weight_version "default" again), and
// nothing while every replica serves it.
func TestStale(t *testing.T) {
	ctx := context.Background()
	a, b := &sglangServer{weightVersion: "default"}, &sglangServer{weightVersion: "default"}
	sa, sb := httptest.NewServer(a.handler(t)), httptest.NewServer(b.handler(t))
	defer sa.Close()
	defer sb.Close()
	g := open(t, servers.SGLang, []string{sa.URL, sb.URL}, Options{Timeout: 5 * time.Second})
	if err := g.Push(ctx, Checkpoint{Dir: checkpointDir(t, "step-000002"), Version: 2}); err != nil {
		t.Fatal(err)
	}
	if stale, err := g.Stale(ctx, 2); err != nil || len(stale) != 0 {
		t.Errorf("every replica serves version 2: stale %q, %v", stale, err)
	}
	b.mu.Lock()
	b.modelPath, b.weightVersion = "", "default" // restarted
	b.mu.Unlock()
	stale, err := g.Stale(ctx, 2)
	if err != nil || len(stale) != 1 || !strings.Contains(stale[0], sb.URL) || !strings.Contains(stale[0], `serves version "default", not 2`) {
		t.Errorf("replica b restarted: stale %q, %v", stale, err)
	}
	sb.Close()
	gs := open(t, servers.SGLang, []string{sb.URL}, Options{Timeout: time.Second})
	if _, err := gs.Stale(ctx, 2); err == nil || !strings.Contains(err.Error(), sb.URL) || !strings.Contains(err.Error(), "did not say which version it serves") {
		t.Errorf("a replica that is down: %v", err)
	}
}

// TestAdapterPushRefusals checks the pushes of a LoRA adapter that fail
// before anything is sent: to SGLang, which has no in-place adapter
// loading, and to a vLLM with no model name to load it under.
func TestAdapterPushRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, peft.ConfigFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens, so a push that sent anything
	// would fail on the connection (after its retries), not with these.
	for _, c := range []struct {
		kind string
		want string
	}{
		{servers.SGLang, "no in-place replacement"},
		{servers.VLLM, "policy.endpoint (http://HOST:PORT/v1?model=NAME)"},
	} {
		g, err := Open(ctx, c.kind, []string{"http://127.0.0.1:1?max_retries=0"}, Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = g.Push(ctx, Checkpoint{Dir: dir, Version: 3})
		g.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: pushing the adapter %s: %v; want it refused, saying %q", c.kind, dir, err, c.want)
		}
	}
}
