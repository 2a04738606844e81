//go:build llamacpp

package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/llamaserver"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/serve"
	"github.com/aipo-rl/aipo/transforms/policy"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

// llamaCall is one /completion exchange the recording proxy saw: the
// request's prompt, seed, stop strings and n_probs, the answer's status,
// tokens and completion_probabilities (with top_logprobs).
type llamaCall struct {
	Prompt []int32
	Seed   int64
	Stop   bool
	NProbs int
	Status int
	Tokens []int32
	Probs  []llamaEntry
}

type llamaEntry struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
	Top     []struct {
		ID      int32   `json:"id"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs"`
}

// recorder is a reverse proxy in front of llama-server that keeps every
// /completion exchange as the server wrote it.
type recorder struct {
	mu    sync.Mutex
	calls []llamaCall
}

type llamaRequest struct {
	Prompt []int32  `json:"prompt"`
	Seed   int64    `json:"seed"`
	Stop   []string `json:"stop"`
	NProbs int      `json:"n_probs"`
}

func (r *recorder) handler(t *testing.T, target string) http.Handler {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		in, ok := resp.Request.Context().Value(requestKey{}).(llamaRequest)
		if !ok {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		call := llamaCall{Prompt: in.Prompt, Seed: in.Seed, Stop: len(in.Stop) > 0, NProbs: in.NProbs, Status: resp.StatusCode}
		if resp.StatusCode == http.StatusOK {
			var out struct {
				Tokens []int32      `json:"tokens"`
				Probs  []llamaEntry `json:"completion_probabilities"`
			}
			if err := json.Unmarshal(body, &out); err != nil {
				return err
			}
			call.Tokens, call.Probs = out.Tokens, out.Probs
		}
		r.mu.Lock()
		r.calls = append(r.calls, call)
		r.mu.Unlock()
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/completion" {
			body, _ := io.ReadAll(req.Body)
			var in llamaRequest
			json.Unmarshal(body, &in)
			req = req.WithContext(context.WithValue(req.Context(), requestKey{}, in))
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		proxy.ServeHTTP(w, req)
	})
}

type requestKey struct{}

func key(ids []int32) string { return fmt.Sprint(ids) }

// check says whether seg's log-probs lps after prefix are values
// llama-server returned: seg is the start of an answer to prefix whose
// completion_probabilities, in order, give the log-probs of the tokens
// they name, and every token they skip has the log-prob an answer listing
// all tokens after prefix+seg[:i] gave it.
func (r *recorder) check(prefix, seg []int32, lps []float32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := map[string]map[int32]float32{}
	for _, c := range r.calls {
		if c.Status == http.StatusOK && c.NProbs > 1 && len(c.Probs) == 1 {
			m := map[int32]float32{}
			for _, e := range c.Probs[0].Top {
				m[e.ID] = float32(e.Logprob)
			}
			all[key(c.Prompt)] = m
		}
	}
	var last error
	for _, c := range r.calls {
		if c.Status != http.StatusOK || c.NProbs != 1 || !slices.Equal(c.Prompt, prefix) || len(c.Tokens) < len(seg) || !slices.Equal(c.Tokens[:len(seg)], seg) {
			continue
		}
		j := 0
		var err error
		for i, id := range seg {
			if j < len(c.Probs) && c.Probs[j].ID == id && float32(c.Probs[j].Logprob) == lps[i] {
				j++
				continue
			}
			at := append(slices.Clip(prefix), seg[:i]...)
			if lp, ok := all[key(at)][id]; !ok || lp != lps[i] {
				err = fmt.Errorf("token %d (id %d): log-prob %v is neither the next of the answer's completion_probabilities nor what the server listed for it after %d tokens (%v, %v)", i, id, lps[i], len(at), lp, ok)
				break
			}
		}
		if err == nil {
			return nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("llama-server never returned tokens %v after the prefix of %d tokens", seg, len(prefix))
	}
	return last
}

// counts are what the client had to do beyond one request per completion:
// draws refused with 500, completions asked again without their stop
// strings, log-probs asked for alone.
func (r *recorder) counts() (refused, again, alone int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range r.calls {
		switch {
		case c.Status == http.StatusInternalServerError:
			refused++
		case c.NProbs > 1:
			alone++
		case !c.Stop && seen[key(c.Prompt)+fmt.Sprint(c.Seed)]:
			again++
		}
		seen[key(c.Prompt)+fmt.Sprint(c.Seed)] = true
	}
	return
}

// stories260KDir writes stories260K as a Hugging Face directory for aipo
// serve: config.json, float32 model.safetensors and the stand-in tokenizer
// that llama-server's GGUF carries (see internal/llamaserver).
func stories260KDir(t *testing.T, bin string) string {
	t.Helper()
	ctx := context.Background()
	cfg, ts, err := checkpoint.LoadLlama2C(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "stories260K")
	if _, err := checkpoint.SaveWeights(ctx, dir, ts, checkpoint.SaveOptions{DType: checkpoint.F32}); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveConfig(ctx, filepath.Join(dir, checkpoint.ConfigName), cfg); err != nil {
		t.Fatal(err)
	}
	if err := llamaserver.WriteHFTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// llamaConfig is a demo rollout step on stories260K: prompts of the demo
// task as they are, a stop string the stories write often.
func llamaConfig(t *testing.T, dir, endpoint string, temperature float32) runconfig.Config {
	t.Helper()
	text := fmt.Sprintf(`
run: {name: llama, dir: %q, seed: 11}
data: {demo: true, batch_size: 6}
policy: {endpoint: %q, temperature: %v, top_k: 3, max_response_tokens: 24, stop: ["_27"], timeout: 60s, retries: 1, backoff_initial: 1ms, backoff_max: 2ms}
rollout: {group_size: 4, max_in_flight: 4, prompt_template: "{{.Problem}}"}
`, dir, endpoint, temperature)
	c, err := runconfig.Parse([]byte(text), "llama.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rolloutStep(t *testing.T, c runconfig.Config) []schemas.Trajectory {
	t.Helper()
	ctx := context.Background()
	m, err := runUnderLease(t, ctx, Options{Config: c, Step: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(c.Data.BatchSize * c.Rollout.GroupSize)
	if m.Rows != want {
		t.Fatalf("%d trajectories, want %d", m.Rows, want)
	}
	trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trajs {
		if tr.FinishReason == schemas.FinishError || len(tr.ResponseIDs) == 0 {
			t.Fatalf("%s/%d: finish %q with %d tokens: the policy call failed", tr.PromptID, tr.SampleIndex, tr.FinishReason, len(tr.ResponseIDs))
		}
	}
	sort.Slice(trajs, func(i, j int) bool {
		if trajs[i].PromptID != trajs[j].PromptID {
			return trajs[i].PromptID < trajs[j].PromptID
		}
		return trajs[i].SampleIndex < trajs[j].SampleIndex
	})
	return trajs
}

// TestRolloutThroughLlamaServer runs the HTTP policy client against
// llama.cpp's llama-server serving stories260K (converted to GGUF by
// llama.cpp's own converter, with the stand-in vocabulary of
// internal/llamaserver), the client telling the server from its
// /v1/models answer:
//   - sampled: a rollout step is committed, and every trajectory's tokens
//     and log-probs are what llama-server returned, as a recording proxy
//     in front of it saw them; on the way the client draws again the
//     completions the server refuses with 500 (text that is not valid
//     UTF-8) and asks again for the log-probs a stop string ("_27", which
//     the filler pieces "[filler_27N]" hold) made the server drop. The
//     learner's log-probs of the same tokens on the same weights agree
//     within llamaserver.LogProbTol.
//   - split-characters: a completion with a character split over byte
//     tokens, whose log-probs the server does not report, gets them from
//     the client's requests for each alone: equal to what the server
//     listed, and to the learner's within LogProbTol.
//   - greedy-vs-aipo-serve: the same greedy step through aipo serve on the
//     same weights writes the same prompt ids (the two tokenizers agree)
//     and the same tokens, with log-probs within LogProbTol.
func TestRolloutThroughLlamaServer(t *testing.T) {
	bin := shareddata.Path(t, "models/stories260K/stories260K.bin")
	srv := llamaserver.Start(t, llamaserver.GGUF(t, bin), 4)
	rec := &recorder{}
	proxy := httptest.NewServer(rec.handler(t, srv.URL))
	defer proxy.Close()
	base := t.TempDir()

	t.Run("sampled", func(t *testing.T) {
		trajs := rolloutStep(t, llamaConfig(t, filepath.Join(base, "sampled"), proxy.URL+"/v1", 1))
		m, err := model.LoadLlama2C(bin)
		if err != nil {
			t.Fatal(err)
		}
		stops := 0
		for _, tr := range trajs {
			if tr.FinishReason == sampling.FinishStop {
				stops++
			}
			prefix := append([]int32(nil), tr.PromptIDs...)
			for start := 0; start < len(tr.ResponseIDs); {
				end := start
				for end < len(tr.ResponseIDs) && tr.TokenSource[end] == schemas.SourcePolicy {
					end++
				}
				if end == start {
					prefix = append(prefix, tr.ResponseIDs[start])
					start++
					continue
				}
				seg := tr.ResponseIDs[start:end]
				if err := rec.check(prefix, seg, tr.BehaviorLogProbs[start:end]); err != nil {
					t.Fatalf("%s/%d: %v", tr.PromptID, tr.SampleIndex, err)
				}
				prefix = append(prefix, seg...)
				start = end
			}
			// The learner's log-probs of the same tokens.
			seq := append(append([]int32(nil), tr.PromptIDs...), tr.ResponseIDs...)
			all, _, err := m.Score(model.Batch{Tokens: seq})
			if err != nil {
				t.Fatal(err)
			}
			lps := all[len(tr.PromptIDs)-1 : len(seq)-1]
			for i, lp := range tr.BehaviorLogProbs {
				if !llamaserver.SameLogProb(lp, lps[i]) {
					t.Errorf("%s/%d token %d (id %d): llama-server's log-prob %v, the learner's %v", tr.PromptID, tr.SampleIndex, i, tr.ResponseIDs[i], lp, lps[i])
				}
			}
		}
		refused, again, alone := rec.counts()
		t.Logf("%d trajectories, %d ended on the stop string; %d requests: %d draws refused with 500, %d completions asked again without stop strings, %d log-probs asked for alone",
			len(trajs), stops, len(rec.calls), refused, again, alone)
		if refused == 0 || again == 0 {
			t.Errorf("the rollout did not take the client through its redraws and its second requests (see the counts above)")
		}
	})

	// Completions in which a character is split over byte tokens: the
	// server records no log-prob for the tokens inside it, and the client
	// asks for each alone. Short completions from the whole vocabulary,
	// sampled until one such comes (one in ten or so on stories260K with
	// the stand-in vocabulary, where a lead byte ends the text).
	t.Run("split-characters", func(t *testing.T) {
		ctx := context.Background()
		c, err := policy.Open(ctx, proxy.URL+"/v1")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		prompt, err := c.Tokenize(ctx, "Tom and Lily went to the park", false)
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.LoadLlama2C(bin)
		if err != nil {
			t.Fatal(err)
		}
		_, _, before := rec.counts()
		for seed := int64(0); seed < 200; seed++ {
			res, err := c.Generate(ctx, policy.Request{Prefix: prompt, Params: sampling.Params{Temperature: 1, MaxTokens: 3, Seed: seed}})
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if _, _, alone := rec.counts(); alone == before {
				continue
			}
			if err := rec.check(prompt, res.Tokens, res.LogProbs); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			seq := append(slices.Clip(prompt), res.Tokens...)
			all, _, err := m.Score(model.Batch{Tokens: seq})
			if err != nil {
				t.Fatal(err)
			}
			for i, lp := range res.LogProbs {
				if want := all[len(prompt)-1+i]; !llamaserver.SameLogProb(lp, want) {
					t.Errorf("seed %d token %d (id %d): log-prob %v, the learner's %v", seed, i, res.Tokens[i], lp, want)
				}
			}
			_, _, alone := rec.counts()
			t.Logf("seed %d: %v, %d log-probs asked for alone", seed, res.Tokens, alone-before)
			return
		}
		t.Fatalf("200 completions and not one with a character split over tokens")
	})

	t.Run("greedy-vs-aipo-serve", func(t *testing.T) {
		dir := stories260KDir(t, bin)
		s, err := serve.New(context.Background(), serve.Options{Checkpoint: dir, Name: "stories260K", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, nil, l, nil, time.Second) }()
		defer func() {
			cancel()
			<-done
			s.Close()
		}()
		llama := rolloutStep(t, llamaConfig(t, filepath.Join(base, "greedy-llama"), srv.URL+"/v1?server=llamacpp", 0))
		aipo := rolloutStep(t, llamaConfig(t, filepath.Join(base, "greedy-aipo"), "http://"+l.Addr().String()+"/v1?model=stories260K", 0))
		if len(llama) != len(aipo) {
			t.Fatalf("%d trajectories through llama-server, %d through aipo serve", len(llama), len(aipo))
		}
		worst := 0.0
		for i := range llama {
			a, b := llama[i], aipo[i]
			who := fmt.Sprintf("%s/%d", a.PromptID, a.SampleIndex)
			if !slices.Equal(a.PromptIDs, b.PromptIDs) {
				t.Fatalf("%s: prompt ids differ: llama-server's tokenizer %v, aipo serve's %v", who, a.PromptIDs, b.PromptIDs)
			}
			if !slices.Equal(a.ResponseIDs, b.ResponseIDs) || a.FinishReason != b.FinishReason {
				t.Fatalf("%s: greedy responses differ: llama-server %v (%s), aipo serve %v (%s)", who, a.ResponseIDs, a.FinishReason, b.ResponseIDs, b.FinishReason)
			}
			for j := range a.BehaviorLogProbs {
				worst = max(worst, float64(abs32(a.BehaviorLogProbs[j]-b.BehaviorLogProbs[j])))
				if !llamaserver.SameLogProb(a.BehaviorLogProbs[j], b.BehaviorLogProbs[j]) {
					t.Errorf("%s token %d (id %d): llama-server's log-prob %v, aipo serve's %v", who, j, a.ResponseIDs[j], a.BehaviorLogProbs[j], b.BehaviorLogProbs[j])
				}
			}
		}
		t.Logf("%d greedy trajectories agree; largest log-prob difference %.2g", len(llama), worst)
	})
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
