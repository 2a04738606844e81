//go:build vllm

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// vllmLogProbTol bounds |vLLM's log-prob - the learner's| of one token on
// the same float32 weights. Both compute in float32, vLLM with PyTorch's
// CPU kernels (oneDNN matrix multiplies, its own CPU attention) and the
// learner with OpenBLAS and its own attention, so every sum runs in
// another order: a dot product of n terms may round differently by up to
// n * 2^-24 times the sum of its terms' magnitudes, 3.8e-6 relative for
// the width-64 layers, and the warm-started model's logits and their
// terms reach a few tens, so single logits may move by up to ~1e-4 per
// layer before the log-softmax over 151,936 of them. Measured here: at
// most 2.5e-4 (the probe on the warm start; its rollout tokens 1.4e-4; a
// random Qwen2.5 2e-5). Defects are far larger: a tied LM head left on
// the previous checkpoint by vLLM's reload moved log-probs by 8e-3 after
// one learner step, and one learner step moves the probe by 5e-2. 1e-3
// keeps a factor 4 above the noise and 8 below the smallest defect.
const vllmLogProbTol = 1e-3

// vllmCall is one /v1/completions exchange the recording proxy saw.
type vllmCall struct {
	// Model is the request's model: the served name or a LoRA adapter's.
	Model  string
	Prompt []int32
	// Reloads is how many reloads had been answered when the request came.
	Reloads int
	Status  int
	// Finish is the answer's finish_reason (abort: stopped at a pause).
	Finish string
	Tokens []int32
	// LogProbs are logprobs.token_logprobs of the answer.
	LogProbs []float64
	// PromptLogProbs are prompt_logprobs[1:] of the prompt's own tokens,
	// for a request that asked for them (the sync's probe).
	PromptLogProbs []float64
}

// vllmProxy is a reverse proxy on 127.0.0.1 before a real vLLM: it keeps
// every /v1/completions exchange as vLLM wrote it and every reload vLLM
// answered, and lets a test take /collective_rpc over.
type vllmProxy struct {
	URL string

	mu      sync.Mutex
	calls   []vllmCall
	reloads []string // weights_path of each reload vLLM answered 200
	// adapters are the lora_path of each runtime LoRA load vLLM answered
	// 200 (/v1/load_lora_adapter).
	adapters []string
	// rpc, when set, sees each /collective_rpc body first; it returns
	// true when it answered the request itself.
	rpc func(w http.ResponseWriter, r *http.Request, weightsPath string) bool
	// completion, when set, sees each completion request first, with the
	// reloads answered so far and whether it is a probe.
	completion func(reloads []string, probe bool)
	// edit, when set, sees each /v1/completions and /pause request before
	// it goes on to vLLM (and may hold it there), and returns the body to
	// send.
	edit func(path string, body []byte) []byte
	// weightInfos counts the GET /weight_info requests vLLM answered.
	weightInfos int
	// streamErrs are the streamed answers that could not be recorded
	// (they went on to the client as vLLM wrote them).
	streamErrs []error
}

type proxyKey struct{}

type proxyReq struct {
	path    string
	model   string
	prompt  []int32
	reload  string
	reloads int
	promptL bool
}

func newVLLMProxy(t *testing.T, target string) *vllmProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &vllmProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	// vLLM down (killed, restarting) is a 502 to the client, which the
	// tests mean to cause; the proxy need not log each one.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	// A streamed answer (rollout.partial) goes to the client event by
	// event, as vLLM writes it, and is recorded once it has all passed.
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		in, ok := resp.Request.Context().Value(proxyKey{}).(proxyReq)
		if !ok {
			return nil
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &recordingBody{rc: resp.Body, done: func(body []byte) {
				if err := p.record(in, resp.StatusCode, body); err != nil {
					p.mu.Lock()
					p.streamErrs = append(p.streamErrs, err)
					p.mu.Unlock()
				}
			}}
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return p.record(in, resp.StatusCode, body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/weight_info" {
			rp.ServeHTTP(w, r)
			p.mu.Lock()
			p.weightInfos++
			p.mu.Unlock()
			return
		}
		if r.URL.Path == "/v1/completions" || r.URL.Path == "/collective_rpc" || r.URL.Path == "/v1/load_lora_adapter" || r.URL.Path == "/pause" {
			body, _ := io.ReadAll(r.Body)
			var in struct {
				Model          string          `json:"model"`
				Prompt         json.RawMessage `json:"prompt"`
				PromptLogprobs *int            `json:"prompt_logprobs"`
				Kwargs         struct {
					WeightsPath string `json:"weights_path"`
				} `json:"kwargs"`
				LoRAPath string `json:"lora_path"`
			}
			json.Unmarshal(body, &in)
			pr := proxyReq{path: r.URL.Path, model: in.Model, reload: in.Kwargs.WeightsPath, promptL: in.PromptLogprobs != nil}
			if in.LoRAPath != "" {
				pr.reload = in.LoRAPath
			}
			json.Unmarshal(in.Prompt, &pr.prompt)
			p.mu.Lock()
			pr.reloads = len(p.reloads)
			hook, seen, edit := p.rpc, p.completion, p.edit
			reloads := slices.Clone(p.reloads)
			p.mu.Unlock()
			if r.URL.Path == "/v1/completions" && seen != nil {
				seen(reloads, pr.promptL)
			}
			if (r.URL.Path == "/v1/completions" || r.URL.Path == "/pause") && edit != nil {
				body = edit(r.URL.Path, body)
				r.ContentLength = int64(len(body))
				r.Header.Del("Content-Length")
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if r.URL.Path == "/collective_rpc" && hook != nil && hook(w, r, pr.reload) {
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), proxyKey{}, pr))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// record keeps what vLLM answered to in.
func (p *vllmProxy) record(in proxyReq, status int, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch in.path {
	case "/collective_rpc":
		if status == http.StatusOK && in.reload != "" {
			p.reloads = append(p.reloads, in.reload)
		}
	case "/v1/load_lora_adapter":
		if status == http.StatusOK {
			p.adapters = append(p.adapters, in.reload)
		}
	case "/v1/completions":
		c := vllmCall{Model: in.model, Prompt: in.prompt, Reloads: in.reloads, Status: status}
		if status == http.StatusOK {
			// A streamed answer (rollout.partial) is one event per
			// "data:" line, each a completion of the tokens since the
			// last; an unstreamed one is a single completion.
			events := [][]byte{body}
			if bytes.HasPrefix(bytes.TrimSpace(body), []byte("data:")) {
				events = nil
				for _, line := range strings.Split(string(body), "\n") {
					if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data:"); ok && strings.TrimSpace(d) != "[DONE]" {
						events = append(events, []byte(d))
					}
				}
			}
			for _, ev := range events {
				var out struct {
					Choices []struct {
						FinishReason *string `json:"finish_reason"`
						TokenIDs     []int32 `json:"token_ids"`
						Logprobs     *struct {
							TokenLogprobs []float64 `json:"token_logprobs"`
						} `json:"logprobs"`
						PromptLogprobs []map[string]struct {
							Logprob float64 `json:"logprob"`
						} `json:"prompt_logprobs"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(ev, &out); err != nil {
					return fmt.Errorf("vLLM's completion answer %q: %v", ev, err)
				}
				if len(out.Choices) == 0 {
					continue // a streamed usage report
				}
				if len(out.Choices) != 1 {
					return fmt.Errorf("vLLM's completion answer %q has %d choices", ev, len(out.Choices))
				}
				ch := out.Choices[0]
				c.Tokens = append(c.Tokens, ch.TokenIDs...)
				if ch.Logprobs != nil {
					c.LogProbs = append(c.LogProbs, ch.Logprobs.TokenLogprobs...)
				}
				if ch.FinishReason != nil {
					c.Finish = *ch.FinishReason
				}
				if in.promptL && len(ch.PromptLogprobs) == len(in.prompt) {
					for i, m := range ch.PromptLogprobs[1:] {
						c.PromptLogProbs = append(c.PromptLogProbs, m[fmt.Sprint(in.prompt[i+1])].Logprob)
					}
				}
			}
		}
		p.calls = append(p.calls, c)
	}
	return nil
}

// recordingBody passes a streamed answer on as it is read and hands the
// whole of it to done when it is closed.
type recordingBody struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	done func(body []byte)
	once sync.Once
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

func (b *recordingBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() { b.done(b.buf.Bytes()) })
	return err
}

// weightInfoCount is how many GET /weight_info requests vLLM answered.
func (p *vllmProxy) weightInfoCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.weightInfos
}

// streamErrors are the streamed answers the proxy could not record.
func (p *vllmProxy) streamErrors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.streamErrs)
}

// setEdit installs (nil: removes) the edit hook.
func (p *vllmProxy) setEdit(f func(path string, body []byte) []byte) {
	p.mu.Lock()
	p.edit = f
	p.mu.Unlock()
}

// setCompletion installs (nil: removes) the completion hook.
func (p *vllmProxy) setCompletion(f func(reloads []string, probe bool)) {
	p.mu.Lock()
	p.completion = f
	p.mu.Unlock()
}

// setRPC installs (nil: removes) the /collective_rpc hook.
func (p *vllmProxy) setRPC(f func(w http.ResponseWriter, r *http.Request, weightsPath string) bool) {
	p.mu.Lock()
	p.rpc = f
	p.mu.Unlock()
}

func (p *vllmProxy) snapshot() ([]vllmCall, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls), slices.Clone(p.reloads)
}

// adapterLoads are the lora_path of every runtime LoRA load vLLM answered
// 200, in order.
func (p *vllmProxy) adapterLoads() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.adapters)
}

// vllmRunConfig is the rehearsal's recipe with vLLM (behind the proxy) as
// the policy server, told of every checkpoint by policy.sync kind vllm,
// and no held-out evaluation.
func vllmRunConfig(t *testing.T, path, runDir, train, proxy, collabAddr string, steps int64, syncTimeout string, query string) runconfig.Config {
	t.Helper()
	text := tinyRecipe{name: "vllm", dir: runDir, steps: steps, train: train, batch: 4,
		policy: proxy + "/v1?model=policy" + query, sync: fmt.Sprintf("{kind: vllm, endpoints: [%q], timeout: %s}", proxy, syncTimeout),
		group: 4, loss: "dapo", collab: collabAddr, eval: "eval:\n  every: 0\n"}.yaml()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := runconfig.Load(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// scoreWith returns m's log-probs of ids[1:] after their prefixes.
func scoreWith(t *testing.T, m *model.Model, ids []int32) []float32 {
	t.Helper()
	lps, _, err := m.Score(model.Batch{Tokens: ids})
	if err != nil {
		t.Fatal(err)
	}
	return lps[:len(ids)-1]
}

// policyRuns are the maximal runs of policy tokens of a trajectory's
// response: [start, end) pairs.
func policyRuns(src []int8) [][2]int {
	var out [][2]int
	for i := 0; i < len(src); {
		if src[i] != schemas.SourcePolicy {
			i++
			continue
		}
		j := i
		for j < len(src) && src[j] == schemas.SourcePolicy {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// checkAgainstVLLM checks that every policy token of trajs, with its
// log-prob, is what vLLM answered: each run of policy tokens starts an
// answer to exactly the prompt and response before it. It returns how many
// tokens it checked.
func checkAgainstVLLM(t *testing.T, calls []vllmCall, trajs []schemas.Trajectory) int {
	t.Helper()
	byPrompt := map[string][]vllmCall{}
	for _, c := range calls {
		if c.Status == http.StatusOK && c.PromptLogProbs == nil {
			byPrompt[fmt.Sprint(c.Prompt)] = append(byPrompt[fmt.Sprint(c.Prompt)], c)
		}
	}
	checked := 0
	for _, tr := range trajs {
		name := fmt.Sprintf("step %d %s/%d", tr.Step, tr.PromptID, tr.SampleIndex)
		for _, run := range policyRuns(tr.TokenSource) {
			prefix := append(slices.Clone(tr.PromptIDs), tr.ResponseIDs[:run[0]]...)
			seg, lps := tr.ResponseIDs[run[0]:run[1]], tr.BehaviorLogProbs[run[0]:run[1]]
			found := false
			for _, c := range byPrompt[fmt.Sprint(prefix)] {
				if len(c.Tokens) < len(seg) || !slices.Equal(c.Tokens[:len(seg)], seg) {
					continue
				}
				same := true
				for i := range seg {
					if float32(c.LogProbs[i]) != lps[i] {
						same = false
					}
				}
				if same {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: policy tokens [%d, %d) (%v) with log-probs %v are not an answer vLLM gave after the %d tokens before them", name, run[0], run[1], seg, lps, len(prefix))
				continue
			}
			checked += len(seg)
		}
	}
	return checked
}

// mismatch is the largest |learner - vLLM| log-prob over the policy tokens
// of trajs, under m.
func mismatch(t *testing.T, m *model.Model, trajs []schemas.Trajectory) float64 {
	t.Helper()
	worst := 0.0
	for _, tr := range trajs {
		ids := append(slices.Clone(tr.PromptIDs), tr.ResponseIDs...)
		lps := scoreWith(t, m, ids)
		for i, src := range tr.TokenSource {
			if src == schemas.SourcePolicy {
				worst = max(worst, math.Abs(float64(lps[len(tr.PromptIDs)-1+i])-float64(tr.BehaviorLogProbs[i])))
			}
		}
	}
	return worst
}

// TestVLLMPolicyServer runs aipo against a real vLLM (0.32.0's CPU build,
// which scripts/vllm.sh installs) serving a tiny Qwen3 with the real Qwen3
// tokenizer and chat template, warm-started as the rehearsal's is to call
// the Verify Agent, behind a proxy that records what vLLM answered:
//
//   - the chat template: what aipo renders and encodes for a conversation
//     is, token for token, what vLLM's /tokenize renders for it;
//   - aipo rollout over HTTP: every policy token and log-prob committed is
//     one vLLM returned, calls are found on the real vocabulary, and the
//     learner's log-probs of the same tokens agree within vllmLogProbTol;
//   - aipo train, 3 steps, policy.sync kind vllm, killed with SIGKILL
//     between the learner step that wrote checkpoint 2 and its sync, and
//     run again: every trajectory sampled by its step's checkpoint (vLLM's
//     weight_version, read after each completion), the sync's probe after
//     each reload equal to that checkpoint's log-probs under the learner
//     (and not the previous one's), the run's mismatch metrics within
//     vllmLogProbTol;
//   - faults: a sync that vLLM does not answer within policy.sync.timeout
//     and a reload acknowledged without reaching the model each fail the
//     run with an error naming the server, nothing committed is lost, and
//     the run resumes; vLLM killed mid-rollout and restarted on its
//     startup weights (ridden out by the client, caught by the version its
//     answers then name) is recovered by the same command, which pushes
//     the checkpoint again and rolls the step out again;
//   - partial rollouts: an asynchronous aipo train with rollout.partial,
//     in which the push of checkpoint 1 pauses vLLM with mode abort while
//     step 1's completions generate (made certain by the proxy), and the
//     rollout continues them on the new weights (vllmPartialTrain);
//   - restarts: vLLM killed while it loads pushed weights (the reload
//     request has reached it), and killed mid-rollout and restarted
//     on the checkpoint the run is at, both ridden out by one aipo train,
//     every trajectory its step's.
func TestVLLMPolicyServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real vLLM and trains a tiny Qwen3")
	}
	ctx := context.Background()
	start := time.Now()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	gsm8k := shareddata.Path(t, "math/gsm8k/train.jsonl")
	base := t.TempDir()
	rows := oneDigitGSM8K(t, gsm8k, 64)
	raw := filepath.Join(base, "gsm8k-one-digit.jsonl")
	writeJSONL(t, raw, rows)
	train := filepath.Join(base, "train.parquet")
	if code, out := runAipo(t, "data", "convert", "--preset", "gsm8k_train", "--in", raw, "--out", train); code != 0 {
		t.Fatalf("aipo data convert exited %d:\n%s", code, out)
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	collabAddr := freeAddr(t)
	collabDir := filepath.Join(base, "qwen3-tiny-collab")
	if err := hfmodel.WriteDir(collabDir, []byte(hfmodel.TinyQwen3Config), 5, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	defer serveOn(t, collabDir, "collab", "", collabAddr)()

	// The warm start renders prompts as the run does; the run's own
	// configuration needs the proxy's address, so a first one serves.
	warm := filepath.Join(base, "qwen3-vllm-warm")
	cfg0 := vllmRunConfig(t, filepath.Join(base, "warm.yaml"), filepath.Join(base, "unused"), train, "http://127.0.0.1:1", collabAddr, 1, "60s", "")
	loss := warmStartQwen3(t, tok, tokDir, warm, cfg0, rows, 60, hfmodel.TinyQwen3VLLMConfig)
	t.Logf("warm start: 60 SFT steps, loss %.3f", loss)

	// LoRA enabled with runtime loading, for the LoRA run ("lora"): the
	// base serves the other subtests as it would without.
	t.Setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
	vs := vllmserver.Start(t, warm, vllmserver.Options{Name: "policy", Args: vllmLoRAArgs})
	px := newVLLMProxy(t, vs.URL)
	defer func() {
		if t.Failed() {
			t.Logf("the end of vLLM's log (%s):\n%s", vs.Log, vs.Tail(40))
		}
	}()
	t.Logf("set-up: %s", time.Since(start).Round(time.Second))

	t.Run("chat template", func(t *testing.T) {
		vllmChatTemplate(t, vs, tokDir, tok, true)
	})

	t.Run("rollout", func(t *testing.T) {
		runDir := filepath.Join(base, "rollout")
		cfgPath := filepath.Join(base, "rollout.yaml")
		vllmRunConfig(t, cfgPath, runDir, train, px.URL, collabAddr, 1, "60s", "")
		t0 := time.Now()
		if code, out := runAipoFor(t, 6*time.Minute, nil, "rollout", "--config", cfgPath, "--step", "0"); code != 0 {
			t.Fatalf("aipo rollout exited %d:\n%s", code, out)
		}
		trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(runDir, 0))
		if err != nil {
			t.Fatal(err)
		}
		calls, _ := px.snapshot()
		n := checkAgainstVLLM(t, calls, trajs)
		interactions := 0
		for _, tr := range trajs {
			interactions += len(tr.InteractionAgent)
		}
		if interactions == 0 {
			t.Errorf("%d trajectories and no collaborator call: the warm-started policy calls the Verify Agent, and the calls must be found on the Qwen3 vocabulary", len(trajs))
		}
		d := mismatch(t, loadModel(t, warm), trajs)
		if d > vllmLogProbTol {
			t.Errorf("the learner's log-probs of vLLM's tokens differ by up to %.3g, more than %.0e", d, vllmLogProbTol)
		}
		t.Logf("aipo rollout through vLLM: %d trajectories, %d policy tokens equal to vLLM's answers, %d calls, learner vs vLLM max |delta log-prob| %.3g (%s)",
			len(trajs), n, interactions, d, time.Since(t0).Round(time.Second))
	})

	t.Run("train", func(t *testing.T) {
		runDir := filepath.Join(base, "run")
		cfgPath := filepath.Join(base, "run.yaml")
		vllmRunConfig(t, cfgPath, runDir, train, px.URL, collabAddr, 3, "120s", "")
		args := []string{"train", "--config", cfgPath, "--init", warm}

		// First attempt: SIGKILL once checkpoint 2 is committed and its
		// reload reaches the proxy, before vLLM hears of it.
		cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		cmd, out := aipoCommand(cctx, t, nil, args...)
		var killed sync.Once
		px.setRPC(func(w http.ResponseWriter, r *http.Request, path string) bool {
			if filepath.Base(path) != "step-000002" {
				return false
			}
			hit := false
			killed.Do(func() {
				if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(runDir, 2)); !ok {
					t.Errorf("the sync of checkpoint 2 began before it was committed")
				}
				cmd.Process.Kill()
				hit = true
			})
			if hit {
				http.Error(w, "the trainer was killed", http.StatusBadGateway)
			}
			return hit
		})
		t0 := time.Now()
		err := cmd.Run()
		px.setRPC(nil)
		if err == nil {
			t.Fatalf("aipo train finished although it was to be killed at the sync of checkpoint 2:\n%s", out)
		}
		if cctx.Err() != nil {
			t.Fatalf("aipo train did not reach the sync of checkpoint 2 in time:\n%s", out)
		}
		t.Logf("killed at the sync of checkpoint 2 after %s", time.Since(t0).Round(time.Second))
		code, text := runAipoFor(t, 15*time.Minute, nil, args...)
		if code != 0 {
			t.Fatalf("aipo train, run again after the kill, exited %d:\n%s", code, text)
		}
		for _, want := range []string{"policy servers (vllm, 1) serve checkpoint 2", "policy servers (vllm, 1) serve checkpoint 3", "step 3/3: loss"} {
			if !strings.Contains(text, want) {
				t.Errorf("the resumed aipo train's output lacks %q:\n%s", want, text)
			}
		}
		t.Logf("aipo train, 3 steps with a kill and a resume: %s", time.Since(t0).Round(time.Second))
		calls, _ := px.snapshot()
		for _, trajs := range sampledByTheirStep(t, runDir, 3) {
			checkAgainstVLLM(t, calls, trajs)
		}
		var info struct {
			WeightVersion string `json:"weight_version"`
		}
		resp, err := http.Get(vs.URL + "/weight_info")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if info.WeightVersion != "3" {
			t.Errorf("after the run vLLM's weight_version is %q, want 3", info.WeightVersion)
		}

		// The probe the sync read after each reload is the checkpoint's.
		calls, reloads := px.snapshot()
		var prev []float32
		for k := int64(0); k <= 3; k++ {
			dir := rundir.Checkpoint(runDir, k)
			abs, _ := filepath.Abs(dir)
			want := scoreWith(t, loadModel(t, dir), weightsync.ProbeTokens)
			var got []float64
			for _, c := range calls {
				if c.PromptLogProbs != nil && slices.Equal(c.Prompt, weightsync.ProbeTokens) && c.Reloads > 0 && reloads[c.Reloads-1] == abs {
					got = c.PromptLogProbs
				}
			}
			if got == nil {
				t.Errorf("checkpoint %d: no probe after its reload (reloads %v)", k, reloads)
				continue
			}
			same, moved := 0.0, 0.0
			for i := range want {
				same = max(same, math.Abs(got[i]-float64(want[i])))
				if prev != nil {
					moved = max(moved, math.Abs(got[i]-float64(prev[i])))
				}
			}
			if same > vllmLogProbTol {
				t.Errorf("checkpoint %d: vLLM's probe log-probs differ from the learner's by up to %.3g", k, same)
			}
			if prev != nil && moved <= vllmLogProbTol {
				t.Errorf("checkpoint %d: vLLM's probe log-probs are within %.3g of checkpoint %d's: the reload did not change them", k, moved, k-1)
			}
			t.Logf("checkpoint %d: probe vs learner max |delta| %.3g, vs checkpoint %d %.3g", k, same, k-1, moved)
			prev = want
		}

		code, text = runAipo(t, "analyze", "--run", runDir)
		if code != 0 {
			t.Fatalf("aipo analyze exited %d:\n%s", code, text)
		}
		var an analytics.Report
		b, err := os.ReadFile(filepath.Join(runDir, "analysis", analytics.JSONName))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &an); err != nil {
			t.Fatal(err)
		}
		for _, st := range an.Steps {
			if st.Mismatch == nil {
				t.Errorf("analysis.json, step %d: no train-inference mismatch", st.Step)
			} else if st.Mismatch.AbsMax > vllmLogProbTol {
				t.Errorf("step %d: train-inference mismatch max |delta| %.3g, want <= %.0e", st.Step, st.Mismatch.AbsMax, vllmLogProbTol)
			} else {
				t.Logf("step %d: train-inference mismatch mean |delta| %.2g, max %.2g", st.Step, st.Mismatch.AbsMean, st.Mismatch.AbsMax)
			}
		}
	})

	t.Run("partial", func(t *testing.T) {
		vllmPartialTrain(t, vs, px, warm, train, collabAddr, base)
	})

	t.Run("lora", func(t *testing.T) {
		vllmLoRATrain(t, vs, px, warm, train, collabAddr, filepath.Join(base, "lora"))
	})

	t.Run("faults", func(t *testing.T) {
		runDir := filepath.Join(base, "faults")
		cfgPath := filepath.Join(base, "faults.yaml")
		// The policy endpoint rides out a vLLM restart (a minute on 2 cores).
		vllmRunConfig(t, cfgPath, runDir, train, px.URL, collabAddr, 2, "5s", "&retry_budget=6m&max_retries=100000")
		args := []string{"train", "--config", cfgPath, "--init", warm}

		// A reload that never answers: the push of checkpoint 0 times out.
		release := make(chan struct{})
		px.setRPC(func(w http.ResponseWriter, r *http.Request, path string) bool {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			http.Error(w, "stalled", http.StatusGatewayTimeout)
			return true
		})
		code, text := runAipoFor(t, 5*time.Minute, nil, args...)
		close(release)
		if code == 0 || !strings.Contains(text, "policy.sync.timeout") || !strings.Contains(text, px.URL) || !strings.Contains(text, "run the same command again") {
			t.Errorf("a sync vLLM does not answer: aipo train exited %d, want an error naming the server, policy.sync.timeout and the resume:\n%s", code, text)
		}
		t.Logf("stalled reload: %s", lineWith(text, "policy.sync.timeout"))

		// A reload acknowledged without reaching the model: checkpoint 1's
		// push answers success and the probe still reads checkpoint 0.
		px.setRPC(func(w http.ResponseWriter, r *http.Request, path string) bool {
			if filepath.Base(path) != "step-000001" {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"results":[null]}`)
			return true
		})
		code, text = runAipoFor(t, 10*time.Minute, nil, args...)
		px.setRPC(nil)
		if code == 0 || !strings.Contains(text, "the load did not reach the model") || !strings.Contains(text, "token ids 10..25") || !strings.Contains(text, px.URL) {
			t.Errorf("a reload that changed nothing: aipo train exited %d, want an error naming the server and the probe:\n%s", code, text)
		}
		t.Logf("hollow reload: %s", lineWith(text, "did not reach the model"))
		m, err := schemas.ReadManifest(ctx, rundir.Step(runDir, 0))
		if err != nil || m.Rows == 0 {
			t.Fatalf("step 0, committed before the failed sync, is gone: %v", err)
		}

		// vLLM killed while step 1 is rolled out, and restarted on its
		// startup weights: the client rides the outage out, the answers of
		// the restarted server name no version (weight_version "default",
		// recorded as version 0), the learner refuses the step, and the
		// same command pushes checkpoint 1 again, rolls step 1 out again
		// and finishes.
		ck1, _ := filepath.Abs(rundir.Checkpoint(runDir, 1))
		restarted := killOnCompletion(t, px, vs, ck1, "")
		code, text = runAipoFor(t, 12*time.Minute, nil, args...)
		px.setCompletion(nil)
		waitRestarted(t, restarted)
		if code != 0 || !strings.Contains(text, "warning: step 1 was sampled in part by policy versions [0") || !strings.Contains(text, "rolling step 1 out again (attempt 1 of 3)") ||
			!strings.Contains(text, "policy servers (vllm, 1) serve checkpoint 2") {
			t.Fatalf("step 1 sampled partly by a vLLM restarted on its startup weights: aipo train exited %d, want it to roll the step out again and finish:\n%s", code, text)
		}
		t.Logf("vLLM restarted mid-rollout: %s", lineWith(text, "rolling step 1 out again"))
		sampledByTheirStep(t, runDir, 2)
	})

	// What a supervisor that restarts vLLM does to a run, ridden out by
	// the same aipo train command: vLLM killed while it reloads checkpoint
	// 1, once the reload request has reached it (the sync retries until it
	// is back, within policy.sync.timeout, and the restarted server is
	// given checkpoint 1 again),
	// and killed while step 2 is rolled out and restarted on checkpoint 2
	// itself, the checkpoint the run is at (its answers name no version,
	// so the learner cannot tell its weights from its startup ones: the
	// step is rolled out again after a push). The run writes its weights
	// as Hugging Face shards (checkpoint.max_shard_size 2 MB), so vLLM
	// reloads sharded checkpoints and starts from one (checkpoint 2).
	t.Run("restarts", func(t *testing.T) {
		runDir := filepath.Join(base, "restarts")
		cfgPath := filepath.Join(base, "restarts.yaml")
		vllmRunConfig(t, cfgPath, runDir, train, px.URL, collabAddr, 3, "4m", "&retry_budget=6m&max_retries=100000")
		f, err := os.OpenFile(cfgPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("checkpoint:\n  max_shard_size: 2000000\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		syncRestarted, killedLoading := killWhileLoading(t, vs, "step-000001")
		px.setRPC(killedLoading)
		ck2, _ := filepath.Abs(rundir.Checkpoint(runDir, 2))
		rolloutRestarted := killOnCompletion(t, px, vs, ck2, ck2)
		code, text := runAipoFor(t, 20*time.Minute, nil, "train", "--config", cfgPath, "--init", warm)
		px.setRPC(nil)
		px.setCompletion(nil)
		waitRestarted(t, syncRestarted)
		waitRestarted(t, rolloutRestarted)
		if code != 0 {
			t.Fatalf("aipo train with vLLM killed mid-sync and restarted on checkpoint 2 mid-rollout exited %d:\n%s", code, text)
		}
		// The restarted server got checkpoint 1 again: a reload of it was
		// answered after the one vLLM died in.
		ck1, _ := filepath.Abs(rundir.Checkpoint(runDir, 1))
		if _, reloads := px.snapshot(); !slices.Contains(reloads, ck1) {
			t.Errorf("no reload of checkpoint 1 was answered after vLLM was killed while loading it; answered reloads: %q", reloads)
		}
		for _, want := range []string{"policy servers (vllm, 1) serve checkpoint 1", "rolling step 2 out again (attempt 1 of 3)", "policy servers (vllm, 1) serve checkpoint 3", "step 3/3: loss"} {
			if !strings.Contains(text, want) {
				t.Errorf("aipo train's output lacks %q:\n%s", want, text)
			}
		}
		t.Logf("vLLM killed while loading checkpoint 1: %s", lineWith(text, "serve checkpoint 1"))
		t.Logf("vLLM restarted on checkpoint 2 mid-rollout: %s", lineWith(text, "rolling step 2 out again"))
		sampledByTheirStep(t, runDir, 3)
		for k := int64(1); k <= 3; k++ {
			idx, err := os.ReadFile(filepath.Join(rundir.Checkpoint(runDir, k), checkpoint.WeightsIndexName))
			if err != nil || !strings.Contains(string(idx), "model-00002-of-") {
				t.Errorf("checkpoint %d is not written in shards (max_shard_size 2 MB): %v", k, err)
			}
		}
	})
	t.Logf("vLLM tests: %s in all", time.Since(start).Round(time.Second))
}

// killWhileLoading returns a /collective_rpc hook that passes the first
// reload of the checkpoint named base on to vLLM itself and SIGKILLs vLLM
// the moment the whole request has been written to its socket (the
// reload has reached it: vLLM dies while it reads or loads the weights,
// never before the request), then restarts it on its startup weights; the
// channel carries the restart's outcome. The request in flight fails, and
// the hook answers it as the proxy answers a server that is down: 502.
// Other requests go through the proxy as usual.
func killWhileLoading(t *testing.T, vs *vllmserver.Server, base string) (chan error, func(http.ResponseWriter, *http.Request, string) bool) {
	var once sync.Once
	restarted := make(chan error, 1)
	return restarted, func(w http.ResponseWriter, r *http.Request, path string) bool {
		if filepath.Base(path) != base {
			return false
		}
		handled := false
		once.Do(func() {
			handled = true
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading the reload request: %v", err)
				return
			}
			killed := make(chan struct{})
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
				vs.Kill()
				close(killed)
			}}
			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(r.Context(), trace), time.Minute)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, r.Method, vs.URL+r.URL.Path, bytes.NewReader(body))
			if err != nil {
				t.Errorf("the reload request: %v", err)
				return
			}
			req.Header = r.Header.Clone()
			// A connection of its own, so that the kill is of this request.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Do(req)
			select {
			case <-killed:
			default:
				t.Errorf("the reload of %s never reached vLLM (%v): it was to be killed while loading it", path, err)
				close(killed)
			}
			go func() { restarted <- vs.Restart() }()
			if err == nil {
				resp.Body.Close()
				t.Errorf("vLLM answered the reload of %s (%s) although it was killed once the request reached it", path, resp.Status)
			}
			http.Error(w, "vLLM was killed while loading the weights", http.StatusBadGateway)
		})
		return handled
	}
}

// killOnCompletion kills vs at the first completion the proxy sees after
// the reload of ckpt (not a sync's probe) and restarts it, on its startup
// weights or, when model is set, on model; the channel carries the
// restart's outcome.
func killOnCompletion(t *testing.T, px *vllmProxy, vs *vllmserver.Server, ckpt, model string) chan error {
	var once sync.Once
	restarted := make(chan error, 1)
	px.setCompletion(func(reloads []string, probe bool) {
		if probe || len(reloads) == 0 || reloads[len(reloads)-1] != ckpt {
			return
		}
		once.Do(func() {
			go func() {
				vs.Kill()
				if model != "" {
					restarted <- vs.RestartOn(model)
				} else {
					restarted <- vs.Restart()
				}
			}()
		})
	})
	return restarted
}

// waitRestarted waits for a restart killOnCompletion (or a hook) began.
func waitRestarted(t *testing.T, restarted chan error) {
	t.Helper()
	select {
	case err := <-restarted:
		if err != nil {
			t.Fatalf("restarting vLLM: %v", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("vLLM was never killed: the request it was to be killed at never reached the proxy")
	}
}

// vllmChatTemplate checks that aipo's rendering of conversations with the
// model's chat template, encoded with its tokenizer, is the token ids
// vLLM's /tokenize renders for the same messages.
func vllmChatTemplate(t *testing.T, vs *vllmserver.Server, tplDir string, tok *tokenizer.HF, thinking bool) {
	t.Helper()
	tm, err := chattemplate.Load(context.Background(), tplDir)
	if err != nil {
		t.Fatal(err)
	}
	convs := [][]chattemplate.Message{
		{{Role: "user", Content: "What is 2+2?"}},
		{{Role: "system", Content: "You are a careful solver. Put the answer in \\boxed{}."}, {Role: "user", Content: "Janet has 3 apples and buys 5 more. How many?"}},
		{{Role: "user", Content: "Solve x^2 = 9."}, {Role: "assistant", Content: "x = 3 or x = -3."}, {Role: "user", Content: "And x^3 = 8?"}},
		{{Role: "user", Content: "Ünïcode, emoji 🙂 and <verify>tags</verify>\n\ttabs."}},
		{{Role: "user", Content: "Say hello."}, {Role: "assistant", Content: "Hello."}},
	}
	for i, msgs := range convs {
		for _, gen := range []bool{true, false} {
			if gen == (msgs[len(msgs)-1].Role == "assistant") {
				continue // a generation prompt follows a user turn only
			}
			o := chattemplate.Options{AddGenerationPrompt: gen}
			body := map[string]any{"model": vs.Name, "messages": msgs, "add_generation_prompt": gen, "add_special_tokens": false}
			if thinking {
				off := false
				o.EnableThinking = &off
				body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
			}
			text, err := tm.Render(msgs, o)
			if err != nil {
				t.Fatal(err)
			}
			ours := tok.EncodeSpecial(text)
			var out struct {
				Tokens []int `json:"tokens"`
			}
			if err := vs.Post(context.Background(), "/tokenize", body, &out); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ours, out.Tokens) {
				t.Errorf("conversation %d (add_generation_prompt %v): aipo renders %d tokens, vLLM %d:\naipo %v\nvLLM %v\ntext %q", i, gen, len(ours), len(out.Tokens), ours, out.Tokens, text)
			}
		}
	}
}

// TestVLLMQwen25 serves a tiny Qwen2.5 (Qwen2ForCausalLM, with q/k/v
// biases, and Qwen2.5's chat template) with vLLM: the chat template renders
// to the same ids, and a completion's log-probs are the learner's within
// vllmLogProbTol.
func TestVLLMQwen25(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real vLLM")
	}
	ctx := context.Background()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	tplDir := filepath.Join(testtools.RepoRoot(), "transforms", "chattemplate", "testdata", "qwen2.5")
	dir := filepath.Join(t.TempDir(), "qwen2.5-tiny")
	c, err := hfconfig.Parse([]byte(hfmodel.TinyQwen2VLLMConfig))
	if err != nil {
		t.Fatal(err)
	}
	ts := append(hfmodel.Tensors(c, 21), hfmodel.QKVBiases(c, 21)...)
	if err := hfmodel.WriteTensors(dir, []byte(hfmodel.TinyQwen2VLLMConfig), ts, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	// Qwen2.5's tokenizer is Qwen3's byte-level BPE without Qwen3's four
	// added tokens; its chat template is its own.
	cfgFile, err := os.ReadFile(filepath.Join(tplDir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfgFile, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	vs := vllmserver.Start(t, dir, vllmserver.Options{Name: "qwen25"})
	vllmChatTemplate(t, vs, dir, tok, false)

	var prompt []int32
	for _, id := range tok.EncodeSpecial("<|im_start|>user\nJanet has 3 apples and buys 5 more. How many does she have?<|im_end|>\n<|im_start|>assistant\n") {
		prompt = append(prompt, int32(id))
	}
	var out struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	body := map[string]any{"model": vs.Name, "prompt": prompt, "max_tokens": 24, "temperature": 1, "seed": 3, "logprobs": 1, "return_token_ids": true}
	if err := vs.Post(ctx, "/v1/completions", body, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 1 || len(out.Choices[0].TokenIDs) == 0 {
		t.Fatalf("vLLM answered %+v", out)
	}
	ch := out.Choices[0]
	ids := append(slices.Clone(prompt), ch.TokenIDs...)
	lps := scoreWith(t, loadModel(t, dir), ids)
	worst := 0.0
	for i, lp := range ch.Logprobs.TokenLogprobs {
		worst = max(worst, math.Abs(lp-float64(lps[len(prompt)-1+i])))
	}
	if worst > vllmLogProbTol {
		t.Errorf("Qwen2.5: the learner's log-probs of vLLM's %d tokens differ by up to %.3g", len(ch.TokenIDs), worst)
	}
	t.Logf("Qwen2.5: %d tokens sampled by vLLM, learner vs vLLM max |delta log-prob| %.3g", len(ch.TokenIDs), worst)
}
