package weightsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/peftdir"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

func init() {
	Register(Kind{
		Name:     servers.VLLM,
		Protocol: "vLLM's /collective_rpc reload_weights",
		Schemes:  []string{"http", "https"},
		Example:  "http://10.0.0.5:8000",
		Sends: "`POST /collective_rpc` `{\"method\": \"reload_weights\", \"kwargs\": {\"weights_path\": DIR}}`, `POST /reset_prefix_cache`, a probe, " +
			"then `POST /update_weight_version` `{\"new_version\": \"K\"}` (start vLLM with `VLLM_SERVER_DEV_MODE=1`, which mounts all of them); " +
			"for a LoRA adapter, `POST /v1/load_lora_adapter` `{\"lora_name\": NAME, \"lora_path\": DIR, \"load_inplace\": true}` in place of the reload " +
			"(NAME: the policy endpoint's `?model=`; start vLLM with `--enable-lora --max-lora-rank R` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` too); " +
			"under `rollout.partial`, `POST /pause?mode=abort` first and `POST /resume` once the version is set, before the probe (and after a push that failed once paused)",
		Checks: "one `null` result per worker, 200 from the cache reset, the probe's log-probs moved since the previous push, " +
			"and `GET /weight_info` then names version K; for an adapter, its success answer, `GET /v1/models` listing NAME loaded from DIR, " +
			"and the probe asked of NAME",
		TiedHead: true, // its reload keeps a tied LM head on its old values (docs/operators.md, vLLM)
		Open: func(_ context.Context, endpoint string, o Options) (Replica, error) {
			return openVLLM(endpoint, o.Timeout, o.Adapter, o.Interrupt)
		},
	})
}

// vllmReplica is a vLLM OpenAI-compatible server started with
// VLLM_SERVER_DEV_MODE=1, told through its development endpoints.
//
// The contract, as vLLM 0.32.0 implements it and as the tests run it
// against a real vLLM (cmd/aipo's vLLM tests, on the CPU build that
// scripts/vllm.sh installs):
//
//	GET /weight_info                       (vllm/entrypoints/rl/online/api_router.py)
//	  200 {"weight_version": "default"|V}  what /update_weight_version last set
//	POST /collective_rpc                   (vllm/entrypoints/serve/dev/rpc/api_router.py)
//	  {"method": "reload_weights", "kwargs": {"weights_path": DIR}}
//	  200 {"results": [null, ...]}         one result per worker
//	POST /reset_prefix_cache               (vllm/entrypoints/serve/cache/api_router.py)
//	  200
//	POST /update_weight_version            (vllm/entrypoints/rl/online/api_router.py)
//	  {"new_version": "K"}  200 {"success": true, "new_version": "K"}
//	POST /v1/completions with prompt_logprobs 0: the probe
//
// All of them are mounted only when VLLM_SERVER_DEV_MODE is set. The
// worker method reload_weights(weights_iterator=None, weights_path=None,
// is_checkpoint_format=True) (vllm/v1/worker/gpu_model_runner.py, which
// the CPU model runner inherits; layerwise reloading, vllm-project/vllm#32133,
// https://docs.vllm.ai/en/latest/training/layerwise/) reads the checkpoint
// with the server's load format and copies it into the running model;
// resetting the prefix cache drops KV blocks computed with the old weights.
//
// vLLM does not check that a reload changed anything, so a push then asks
// for the log-probs of a fixed probe: when the same process pushed another
// checkpoint before and the probe's log-probs are still the ones after
// that push, the reload did not reach the model and the push fails,
// naming the probe. (The first push of a process is not judged: the
// server may have started on the checkpoint's very weights.)
//
// The version is then set with /update_weight_version; the HTTP policy
// client reads /weight_info after each completion, so a server restarted
// on its startup weights (weight_version "default" again) is seen in the
// versions its trajectories record. vLLM releases without the RL routes
// (before /update_weight_version) answer 404 there: the push goes on
// without a version, and the rollout's endpoint carries it instead.
type vllmReplica struct {
	s *httpServer
	// adapter is the model name LoRA adapters are loaded under (Options.Adapter).
	adapter string
	// interrupt: each push pauses the server with mode abort first
	// (Options.Interrupt; see Push).
	interrupt bool

	mu sync.Mutex
	// versioned: the last push set the server's weight_version.
	versioned bool
	// lastVersion and lastProbe are the version this process pushed last
	// and the probe's log-probs after it (nil before the first push).
	lastVersion int64
	lastProbe   []float64
}

func openVLLM(endpoint string, timeout time.Duration, adapter string, interrupt bool) (Replica, error) {
	s, err := openHTTP(endpoint, timeout)
	if err != nil {
		return nil, err
	}
	return &vllmReplica{s: s, adapter: adapter, interrupt: interrupt}, nil
}

// NamesVersions reports whether the last push set the server's
// weight_version, which its /weight_info then names.
func (r *vllmReplica) NamesVersions() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.versioned
}

// ProbeTokens is the prompt whose log-probs a vLLM push compares before
// and after the reload: token ids 10 to 25, which every vocabulary of the
// model families aipo trains has (in the byte-level BPE vocabularies of
// Qwen and Llama 3 they are the characters "+" to ":").
var ProbeTokens = func() []int32 {
	ids := make([]int32, 16)
	for i := range ids {
		ids[i] = int32(10 + i)
	}
	return ids
}()

// probeName names the probe in errors.
func probeName() string {
	return fmt.Sprintf("the log-probs of token ids %d..%d as a prompt (/v1/completions, prompt_logprobs 0)", ProbeTokens[0], ProbeTokens[len(ProbeTokens)-1])
}

// weightVersion is /weight_info's weight_version ("" when the server has
// no such route: an older vLLM).
func (r *vllmReplica) weightVersion(ctx context.Context) (string, error) {
	status, b, err := r.s.call(ctx, http.MethodGet, "/weight_info", nil)
	if err != nil {
		return "", err
	}
	if status == http.StatusNotFound {
		return "", nil
	}
	var ans struct {
		WeightVersion *string `json:"weight_version"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &ans) != nil || ans.WeightVersion == nil {
		return "", fmt.Errorf("GET /weight_info answered %d %s, not {\"weight_version\": ...}", status, short(b))
	}
	return *ans.WeightVersion, nil
}

// probe is the server's log-probs of ProbeTokens[1:] after their
// prefixes, by model (its base model when "").
func (r *vllmReplica) probe(ctx context.Context, model string) ([]float64, error) {
	body := map[string]any{"prompt": ProbeTokens, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
	if model != "" {
		body["model"] = model
	}
	status, b, err := r.s.call(ctx, http.MethodPost, "/v1/completions", body)
	if err != nil {
		return nil, fmt.Errorf("probe (%s): %w", probeName(), err)
	}
	var ans struct {
		Choices []struct {
			PromptLogprobs []map[string]struct {
				Logprob float64 `json:"logprob"`
			} `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &ans) != nil || len(ans.Choices) != 1 || len(ans.Choices[0].PromptLogprobs) != len(ProbeTokens) {
		return nil, fmt.Errorf("probe (%s) answered %d %s", probeName(), status, short(b))
	}
	out := make([]float64, 0, len(ProbeTokens)-1)
	for i, m := range ans.Choices[0].PromptLogprobs[1:] {
		e, ok := m[strconv.Itoa(int(ProbeTokens[i+1]))]
		if !ok {
			return nil, fmt.Errorf("probe (%s): prompt_logprobs[%d] has no entry for token %d", probeName(), i+1, ProbeTokens[i+1])
		}
		out = append(out, e.Logprob)
	}
	return out, nil
}

// Push loads ck's weights (or adapter) and settles them (settle). Under
// Options.Interrupt it first pauses the server with
//
//	POST /pause?mode=abort                 (vllm/entrypoints/rl/online/api_router.py)
//	  200 {"status": "paused"}
//
// which aborts every request in flight (each answers finish_reason
// "abort" with the tokens and log-probs it sampled) and holds new ones
// unscheduled until POST /resume; settle then sets the version before it
// resumes the server, so that nothing is sampled by the new weights
// under the old version, and probes after (a paused server samples
// nothing). A push that fails after the pause was asked for (the pause
// itself included: its answer may be lost after vLLM paused) still
// resumes the server, within resumeTimeout of its own even when ctx has
// ended (the push's timeout, a run stopped), so that vLLM is not left
// paused, holding every request, for the next run; the error says when
// the resume failed too. The version may then name the weights before
// the load; the run stops on the error, and the next one pushes its
// checkpoint before it samples.
func (r *vllmReplica) Push(ctx context.Context, ck Checkpoint) (err error) {
	if r.interrupt {
		defer func() {
			if err == nil || errors.Is(err, errNoPauseRoute) {
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resumeTimeout)
			defer cancel()
			if rerr := r.post(rctx, "/resume"); rerr != nil {
				err = fmt.Errorf("%w; and the resume after it failed too, so vLLM may stay paused (POST /resume to it by hand): %v", err, rerr)
			}
		}()
		if err := r.post(ctx, "/pause?mode=abort"); err != nil {
			return err
		}
	}
	if peftdir.IsAdapterDir(ck.Dir) {
		if err := r.loadAdapter(ctx, ck); err != nil {
			return err
		}
		return r.settle(ctx, ck, r.adapter, "the adapter was loaded")
	}
	body := map[string]any{"method": "reload_weights", "kwargs": map[string]string{"weights_path": ck.Dir}}
	status, b, err := r.s.call(ctx, http.MethodPost, "/collective_rpc", body)
	if err != nil {
		return err
	}
	if status == http.StatusNotFound {
		return fmt.Errorf("POST /collective_rpc answered 404: start vLLM with VLLM_SERVER_DEV_MODE=1, which mounts it")
	}
	if status != http.StatusOK {
		return fmt.Errorf("POST /collective_rpc reload_weights answered %d %s", status, short(b))
	}
	var ans struct {
		Results *[]json.RawMessage `json:"results"`
	}
	if json.Unmarshal(b, &ans) != nil || ans.Results == nil || len(*ans.Results) == 0 {
		return fmt.Errorf("POST /collective_rpc reload_weights answered %s, not {\"results\": [...]} with one result per worker", short(b))
	}
	for i, res := range *ans.Results {
		if string(res) != "null" {
			return fmt.Errorf("POST /collective_rpc reload_weights: worker %d answered %s, not null", i, short(res))
		}
	}
	return r.settle(ctx, ck, "", "the weights were reloaded")
}

// settle follows a load of ck's weights (done says which, for errors):
// it drops the prefix cache, checks with the probe asked of model that
// the load reached the model, and sets the server's weight version.
//
// Under Options.Interrupt (the server paused by Push) the version is set
// first and the server resumed before the probe: a paused vLLM samples
// nothing, the probe included. A probe that then fails fails the push
// as before, with the server already naming the version.
func (r *vllmReplica) settle(ctx context.Context, ck Checkpoint, model, done string) error {
	status, b, err := r.s.call(ctx, http.MethodPost, "/reset_prefix_cache", nil)
	if err != nil {
		return fmt.Errorf("%s, but POST /reset_prefix_cache failed: %w", done, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s, but POST /reset_prefix_cache answered %d %s", done, status, short(b))
	}
	if r.interrupt {
		if err := r.setVersion(ctx, ck, done); err != nil {
			return err
		}
		if !r.NamesVersions() {
			return fmt.Errorf("%s, but POST /update_weight_version answered 404: rollout.partial needs vLLM to name the version of its answers (its RL routes, mounted by VLLM_SERVER_DEV_MODE=1)", done)
		}
		if err := r.post(ctx, "/resume"); err != nil {
			return fmt.Errorf("%s, but %w", done, err)
		}
		return r.checkProbe(ctx, ck, model, done)
	}
	if err := r.checkProbe(ctx, ck, model, done); err != nil {
		return err
	}
	return r.setVersion(ctx, ck, done)
}

// checkProbe asks the probe of model and fails when it did not move
// since the previous push of another version.
func (r *vllmReplica) checkProbe(ctx context.Context, ck Checkpoint, model, done string) error {
	now, err := r.probe(ctx, model)
	if err != nil {
		return fmt.Errorf("%s, but %w", done, err)
	}
	r.mu.Lock()
	prev, prevProbe := r.lastVersion, r.lastProbe
	r.mu.Unlock()
	if prevProbe != nil && prev != ck.Version && sameFloats(prevProbe, now) {
		return fmt.Errorf("vLLM answered success (%s), but %s are those of version %d, pushed before: the load did not reach the model (unless checkpoint %d's weights equal version %d's)", done, probeName(), prev, ck.Version, prev)
	}
	r.mu.Lock()
	r.lastVersion, r.lastProbe = ck.Version, now
	r.mu.Unlock()
	return nil
}

// setVersion sets the server's weight version to ck's and checks that
// /weight_info names it; a server without the route is left unversioned.
func (r *vllmReplica) setVersion(ctx context.Context, ck Checkpoint, done string) error {
	version := strconv.FormatInt(ck.Version, 10)
	status, b, err := r.s.call(ctx, http.MethodPost, "/update_weight_version", map[string]string{"new_version": version})
	if err != nil {
		return fmt.Errorf("%s, but POST /update_weight_version failed: %w", done, err)
	}
	if status == http.StatusNotFound {
		r.setVersioned(false)
		return nil // a vLLM without the RL routes: the endpoint carries the version
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s, but POST /update_weight_version answered %d %s", done, status, short(b))
	}
	if got, err := r.weightVersion(ctx); err != nil || got != version {
		return fmt.Errorf("after POST /update_weight_version %s, GET /weight_info reports %q (%v)", version, got, err)
	}
	r.setVersioned(true)
	return nil
}

// resumeTimeout bounds the POST /resume that a failed push sends.
const resumeTimeout = 30 * time.Second

// errNoPauseRoute is a vLLM without POST /pause: nothing was paused.
var errNoPauseRoute = errors.New("start vLLM with VLLM_SERVER_DEV_MODE=1, which mounts it (a release before 0.32.0 may lack it), or turn rollout.partial off")

// post sends an empty POST to path and wants 200.
func (r *vllmReplica) post(ctx context.Context, path string) error {
	status, b, err := r.s.call(ctx, http.MethodPost, path, nil)
	if err != nil {
		return fmt.Errorf("POST %s failed: %w", path, err)
	}
	if status == http.StatusNotFound && strings.HasPrefix(path, "/pause") {
		return fmt.Errorf("POST %s answered 404 (rollout.partial pauses vLLM at each push): %w", path, errNoPauseRoute)
	}
	if status != http.StatusOK {
		return fmt.Errorf("POST %s answered %d %s", path, status, short(b))
	}
	return nil
}

// Serving is /weight_info's weight_version when a push of this process
// set it (a server restarted since says "default"), else "".
func (r *vllmReplica) Serving(ctx context.Context) (string, error) {
	if !r.NamesVersions() {
		return "", nil
	}
	return r.weightVersion(ctx)
}

func (r *vllmReplica) setVersioned(v bool) {
	r.mu.Lock()
	r.versioned = v
	r.mu.Unlock()
}

// sameFloats reports whether a and b hold the same values.
func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}

func (r *vllmReplica) Close() error { return r.s.close() }

// loadAdapter loads the LoRA adapter in ck.Dir under the replica's
// adapter name, in place of the one loaded before under that name, and
// checks that GET /v1/models lists it from ck.Dir.
//
// The contract, as vLLM 0.32.0 implements it (and the vLLM tests run it):
//
//	POST /v1/load_lora_adapter              (vllm/entrypoints/serve/lora/api_router.py,
//	  {"lora_name": NAME, "lora_path": DIR,  mounted only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)
//	   "load_inplace": true}
//	  200 "Success: LoRA adapter 'NAME' added successfully."
//	  400/404/500 {"error": {"message": ...}}  (a rank above --max-lora-rank:
//	                                          "LoRA rank R is greater than max_lora_rank M.")
//	GET /v1/models                          the adapter as {"id": NAME, "root": DIR, "parent": BASE}
//
// load_inplace keeps the adapter's id, so that requests naming NAME
// sample with the new matrices from the next step on; vLLM does not drop
// the prefix cache blocks computed with the old ones (it warns when the
// path is the same), so settle resets the prefix cache as after a
// full-weight reload.
func (r *vllmReplica) loadAdapter(ctx context.Context, ck Checkpoint) error {
	if r.adapter == "" {
		return fmt.Errorf("%s is a LoRA adapter, which vLLM loads under a model name, and none is set: put the name the rollouts ask for in policy.endpoint (http://HOST:PORT/v1?model=NAME)", ck.Dir)
	}
	body := map[string]any{"lora_name": r.adapter, "lora_path": ck.Dir, "load_inplace": true}
	status, b, err := r.s.call(ctx, http.MethodPost, "/v1/load_lora_adapter", body)
	if err != nil {
		return err
	}
	if status == http.StatusNotFound && !strings.Contains(strings.ToLower(string(b)), "lora") {
		return fmt.Errorf("POST /v1/load_lora_adapter answered 404: start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, which mounts it, and --enable-lora --max-lora-rank R (R at least the adapter's rank)")
	}
	if status != http.StatusOK {
		return fmt.Errorf("POST /v1/load_lora_adapter %s answered %d %s%s", ck.Dir, status, short(b), r.adapterHint(ck.Dir, string(b)))
	}
	if !strings.HasPrefix(strings.Trim(string(b), "\" "), "Success") {
		return fmt.Errorf("POST /v1/load_lora_adapter %s answered %s, not vLLM's \"Success: LoRA adapter ... added successfully.\"", ck.Dir, short(b))
	}
	status, b, err = r.s.call(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return fmt.Errorf("the adapter was loaded, but GET /v1/models failed: %w", err)
	}
	var models struct {
		Data []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"data"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &models) != nil {
		return fmt.Errorf("the adapter was loaded, but GET /v1/models answered %d %s", status, short(b))
	}
	for _, m := range models.Data {
		if m.ID == r.adapter {
			if m.Root != ck.Dir {
				return fmt.Errorf("after loading %s, GET /v1/models lists the adapter %q from %s", ck.Dir, r.adapter, m.Root)
			}
			return nil
		}
	}
	return fmt.Errorf("after loading %s, GET /v1/models does not list the adapter %q", ck.Dir, r.adapter)
}

// adapterHint is the fix for vLLM's refusal msg of the adapter in dir.
func (r *vllmReplica) adapterHint(dir, msg string) string {
	switch {
	case strings.Contains(msg, "max_lora_rank"):
		rank := "its rank"
		if r, err := peftdir.Rank(dir); err == nil {
			rank = fmt.Sprintf("its rank %d", r)
		}
		return fmt.Sprintf(": restart vLLM with --max-lora-rank at least %s (vLLM takes 1, 8, 16, 32, 64, 128, 256, 320 or 512), or train a smaller rank (learner.lora.rank)", rank)
	case strings.Contains(msg, "enable_lora") || strings.Contains(msg, "enable-lora") || strings.Contains(strings.ToLower(msg), "lora is not enabled"):
		return ": start vLLM with --enable-lora"
	case strings.Contains(msg, "conflicts with a served base model"):
		return fmt.Sprintf(": the adapter needs a name of its own: policy.endpoint's ?model= names the base (%s)", r.adapter)
	}
	return ""
}
