//go:build vllm

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// vllmPartialTrain runs aipo train against the real vLLM vs (behind the
// recording proxy px) asynchronously with rollout.partial, 3 steps:
// policy.sync kind vllm pauses vLLM with mode abort at each push, and the
// rollout client streams its completions, keeps what an aborted one
// sampled and continues it from the prompt plus those tokens, by token
// ids, on the new weights.
//
// The interruption is made certain, not left to timing, by the proxy (a
// test hook, nothing of aipo's): once step 0 is committed, the
// completions that come before the second pause (the push of checkpoint
// 1, which starts step 2's rollout) are step 1's, sampled by checkpoint
// 0; the proxy holds them, then, when the pause arrives, lets them
// through with vLLM's min_tokens set to their max_tokens (so that none
// can end early), waits until vLLM reports them all running with tokens
// sampled and the clients have read the weight version after their
// first token (GET /weight_info, by which the client tells that version
// 0 sampled them; see httpclient's generateVLLMPartial), and only then
// passes the pause on. The run must then show: calls vLLM answered with
// finish reason abort and aipo counted as interrupted, every token an
// aborted call had sampled kept in a trajectory, followed there by
// tokens of a later version, step 1 trajectories holding policy tokens
// of versions 0 and 1, every step with all its batch x group samples and
// none failed, and every policy token's recorded log-prob within
// vllmLogProbTol of the learner's under the checkpoint of the token's
// version (vLLM's raw log-probs are taken before min_tokens masks the
// end of sequence). The loss is Dr. GRPO's, which keeps every group
// (DAPO's dynamic sampling would leave out those whose rewards are all
// equal, and with them, often, every sample the push interrupted).
func vllmPartialTrain(t *testing.T, vs *vllmserver.Server, px *vllmProxy, warm, train, collabAddr, base string) {
	ctx := context.Background()
	runDir := filepath.Join(base, "partial")
	cfgPath := filepath.Join(base, "partial.yaml")
	text := tinyRecipe{name: "vllm", dir: runDir, steps: 3, train: train, batch: 4,
		policy: px.URL + "/v1?model=policy", sync: fmt.Sprintf("{kind: vllm, endpoints: [%q], timeout: 300s}", px.URL),
		group: 4, loss: "drgrpo", collab: collabAddr, eval: "eval:\n  every: 0\n"}.yaml()
	for old, new := range map[string]string{"steps: 3}": "steps: 3, async: true}", "max_response_tokens: 40": "max_response_tokens: 160", "rollout:\n": "rollout:\n  partial: true\n"} {
		if !strings.Contains(text, old) {
			t.Fatalf("the tiny recipe has no %q to change", old)
		}
		text = strings.Replace(text, old, new, 1)
	}
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	pauses, held := 0, 0
	release := make(chan struct{})
	step0 := rundir.Manifest(rundir.Step(runDir, 0))
	var holdErr error
	fail := func(err error) {
		mu.Lock()
		if holdErr == nil {
			holdErr = err
		}
		mu.Unlock()
	}
	px.setEdit(func(path string, body []byte) []byte {
		if path == "/pause" {
			mu.Lock()
			pauses++
			n := pauses
			mu.Unlock()
			if n != 2 {
				return body
			}
			if err := waitFor(3*time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return held > 0 }); err != nil {
				fail(fmt.Errorf("the push of checkpoint 1 came, and no completion of step 1 was held for it: %w", err))
				close(release)
				return body
			}
			time.Sleep(time.Second) // let the rest of the step's first calls come
			mu.Lock()
			n = held
			mu.Unlock()
			gen0, _, err := vllmGenerating(vs.URL)
			if err != nil {
				fail(err)
			}
			wi0 := px.weightInfoCount()
			close(release)
			if err := waitFor(2*time.Minute, func() bool {
				gen, running, err := vllmGenerating(vs.URL)
				return err == nil && running >= float64(n) && gen-gen0 >= float64(2*n) && px.weightInfoCount()-wi0 >= n
			}); err != nil {
				fail(fmt.Errorf("the %d held completions of step 1 did not all run in vLLM and get their first token to the client: %w", n, err))
			}
			return body
		}
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil || req["prompt_logprobs"] != nil {
			return body // the sync's probe
		}
		mu.Lock()
		armed := pauses == 1
		mu.Unlock()
		if _, err := os.Stat(step0); !armed || err != nil {
			return body
		}
		mu.Lock()
		held++
		mu.Unlock()
		req["min_tokens"] = req["max_tokens"]
		select {
		case <-release:
		case <-time.After(5 * time.Minute):
		}
		b, err := json.Marshal(req)
		if err != nil {
			fail(err)
			return body
		}
		return b
	})
	defer px.setEdit(nil)
	t0 := time.Now()
	code, out := runAipoFor(t, 15*time.Minute, nil, "train", "--config", cfgPath, "--init", warm)
	px.setEdit(nil)
	if code != 0 {
		t.Fatalf("aipo train with rollout.partial against vLLM exited %d:\n%s", code, out)
	}
	if holdErr != nil {
		t.Fatal(holdErr)
	}
	t.Logf("aipo train, 3 steps, async with partial rollouts: %s; %d completions of step 1 held for the push of checkpoint 1", time.Since(t0).Round(time.Second), held)

	if errs := px.streamErrors(); len(errs) > 0 {
		t.Errorf("the proxy could not read %d streamed answers: %v", len(errs), errs[0])
	}
	calls, _ := px.snapshot()
	var abortedCalls []vllmCall
	var kept []int
	for _, c := range calls {
		if c.Finish == "abort" {
			abortedCalls = append(abortedCalls, c)
			kept = append(kept, len(c.Tokens))
		}
	}
	t.Logf("vLLM aborted %d completions, which had sampled %v tokens", len(abortedCalls), kept)
	if len(abortedCalls) == 0 {
		t.Errorf("vLLM answered no completion with finish reason abort: the pushes interrupted nothing")
	}
	aborted := len(abortedCalls)
	var all []schemas.Trajectory
	models := map[int64]*model.Model{}
	scored, worst, interrupted, mixed := 0, 0.0, int64(0), 0
	for k := int64(0); k < 3; k++ {
		trajs, m, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(runDir, k))
		if err != nil {
			t.Fatal(err)
		}
		st, err := records.ReadStepStats(m.Meta)
		if err != nil {
			t.Fatal(err)
		}
		if st.Trajectories != 16 || st.Finish[schemas.FinishError] != 0 || m.Rows != 16 || len(trajs) != 16 {
			t.Errorf("step %d: %d trajectories sampled (%d failed), %d written, %d read; want 16 of each, none failed", k, st.Trajectories, st.Finish[schemas.FinishError], m.Rows, len(trajs))
		}
		all = append(all, trajs...)
		interrupted += st.PolicyInterrupted
		for _, tr := range trajs {
			name := fmt.Sprintf("step %d %s/%d", k, tr.PromptID, tr.SampleIndex)
			if tr.FinishReason == schemas.FinishError {
				t.Errorf("%s failed (finish reason error): not trained on", name)
				continue
			}
			seq := append(slices.Clone(tr.PromptIDs), tr.ResponseIDs...)
			byVersion := map[int64][]float32{}
			for i, v := range tr.TokenVersions() {
				if tr.TokenSource[i] != schemas.SourcePolicy {
					continue
				}
				if v != max(k-1, 0) && v != k {
					t.Fatalf("%s: token %d has version %d, want %d or %d", name, i, v, max(k-1, 0), k)
				}
				lps, ok := byVersion[v]
				if !ok {
					if models[v] == nil {
						models[v] = loadModel(t, rundir.Checkpoint(runDir, v))
					}
					lps = scoreWith(t, models[v], seq)
					byVersion[v] = lps
				}
				d := math.Abs(float64(lps[len(tr.PromptIDs)-1+i]) - float64(tr.BehaviorLogProbs[i]))
				worst = max(worst, d)
				scored++
				if d > vllmLogProbTol {
					t.Errorf("%s: token %d (version %d) has the recorded log-prob %g; checkpoint %d's weights give %g", name, i, v, tr.BehaviorLogProbs[i], v, lps[len(tr.PromptIDs)-1+i])
				}
			}
			if len(byVersion) > 1 {
				mixed++
			}
			if k == 1 {
				vs := map[int64]int{}
				for i, v := range tr.TokenVersions() {
					if tr.TokenSource[i] == schemas.SourcePolicy {
						vs[v]++
					}
				}
				t.Logf("%s: policy tokens by version %v, finish %s", name, vs, tr.FinishReason)
			}
		}
	}
	// Every token an aborted completion sampled is in a trajectory, after
	// the completion's prompt, with vLLM's log-probs, one version, and
	// tokens of a later version after them when the sample went on.
	for i, c := range abortedCalls {
		if len(c.Tokens) == 0 {
			continue
		}
		if !keptIn(all, c) {
			t.Errorf("aborted completion %d (prompt of %d tokens) sampled %d tokens %v that no trajectory holds after its prompt with their log-probs and a later version after them", i, len(c.Prompt), len(c.Tokens), c.Tokens)
		}
	}
	t.Logf("%d completions aborted by vLLM, %d policy calls interrupted, %d trajectories with policy tokens of two versions; %d policy tokens scored by their version's checkpoint: max |delta log-prob| %.3g",
		aborted, interrupted, mixed, scored, worst)
	if interrupted == 0 {
		t.Errorf("the steps' manifests count no interrupted policy call")
	}
	if mixed == 0 {
		t.Errorf("no trajectory holds policy tokens of two versions")
	}
	pushLeavesNoPause(t, vs, px, runDir)
}

// pushLeavesNoPause pushes a checkpoint of runDir under rollout.partial
// through the proxy, which holds its reload past the push's timeout and
// never passes it on: the push has paused vLLM, fails on its timeout,
// and must resume vLLM although its context has ended.
func pushLeavesNoPause(t *testing.T, vs *vllmserver.Server, px *vllmProxy, runDir string) {
	ctx := context.Background()
	g, err := weightsync.Open(ctx, "vllm", []string{px.URL}, weightsync.Options{Timeout: 2 * time.Second, Interrupt: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	px.setRPC(func(w http.ResponseWriter, r *http.Request, path string) bool {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		http.Error(w, "held by the test past the push's timeout", http.StatusServiceUnavailable)
		return true
	})
	defer px.setRPC(nil)
	err = g.Push(ctx, weightsync.Checkpoint{Dir: rundir.Checkpoint(runDir, 1), Version: 1})
	if err == nil || !strings.Contains(err.Error(), "policy.sync.timeout") || strings.Contains(err.Error(), "may stay paused") {
		t.Errorf("a push whose reload outlived its timeout: %v, want a timeout error and vLLM resumed", err)
	}
	var st struct {
		Paused *bool `json:"is_paused"`
	}
	resp, err := http.Get(vs.URL + "/is_paused")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Paused == nil || *st.Paused {
		t.Errorf("vLLM after a push that failed on its timeout: GET /is_paused %v (%v), want is_paused false", st.Paused, err)
	}
}

// keptIn reports whether a trajectory of trajs holds c's tokens right
// after c's prompt, with c's log-probs (float32), all of one version, and
// either ends with them or has its next policy token of a later version.
func keptIn(trajs []schemas.Trajectory, c vllmCall) bool {
	for _, tr := range trajs {
		seq := append(slices.Clone(tr.PromptIDs), tr.ResponseIDs...)
		at := len(c.Prompt) - len(tr.PromptIDs)
		if at < 0 || len(seq) < len(c.Prompt)+len(c.Tokens) || !slices.Equal(seq[:len(c.Prompt)], c.Prompt) || !slices.Equal(seq[len(c.Prompt):len(c.Prompt)+len(c.Tokens)], c.Tokens) {
			continue
		}
		versions := tr.TokenVersions()
		v, ok := versions[at], true
		for j := range c.Tokens {
			i := at + j
			ok = ok && tr.TokenSource[i] == schemas.SourcePolicy && versions[i] == v && tr.BehaviorLogProbs[i] == float32(c.LogProbs[j])
		}
		for i := at + len(c.Tokens); ok && i < len(tr.ResponseIDs); i++ {
			if tr.TokenSource[i] == schemas.SourcePolicy {
				ok = versions[i] > v
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// waitFor polls cond every 100 ms until it holds, for at most limit.
func waitFor(limit time.Duration, cond func() bool) error {
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// vllmGenerating reads vLLM's Prometheus metrics at root: the tokens it
// has generated so far (vllm:generation_tokens_total) and the requests
// running now (vllm:num_requests_running), each summed over its labels.
func vllmGenerating(root string) (generated, running float64, err error) {
	resp, err := http.Get(root + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		var dst *float64
		switch {
		case strings.HasPrefix(line, "vllm:generation_tokens_total"):
			dst = &generated
		case strings.HasPrefix(line, "vllm:num_requests_running"):
			dst = &running
		default:
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("vLLM's /metrics line %q: %w", line, err)
		}
		*dst += v
		seen++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if seen == 0 {
		return 0, 0, fmt.Errorf("vLLM's /metrics has neither vllm:generation_tokens_total nor vllm:num_requests_running")
	}
	return generated, running, nil
}
