package weightsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aipo-rl/aipo/internal/peftdir"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

func init() {
	Register(Kind{
		Name:          servers.SGLang,
		Protocol:      "SGLang's /update_weights_from_disk",
		Schemes:       []string{"http", "https"},
		Example:       "http://10.0.0.5:30000",
		Sends:         "`POST /update_weights_from_disk` `{model_path, weight_version, load_format?}`; a LoRA run's adapters are refused, saying why (docs/lora-serving.md)",
		Checks:        "`success: true`, then `GET /get_model_info` reports the checkpoint as `model_path` and its version as `weight_version`",
		LoadFormat:    true,
		NamesVersions: true,
		Open: func(_ context.Context, endpoint string, o Options) (Replica, error) {
			return openSGLang(endpoint, o.LoadFormat, o.Timeout)
		},
	})
}

// sglangReplica is an SGLang server, told through its native API.
//
// The contract, as SGLang documents it ("Update Weights From Disk" and
// "Get Model Info" of https://docs.sglang.io/basic_usage/native_api.html,
// from docs/basic_usage/native_api.ipynb; the refit section of
// https://docs.sglang.io/advanced_features/sglang_for_rl.html) and implements it
// (python/sglang/srt/entrypoints/http_server.py, update_weights_from_disk
// and get_model_info; UpdateWeightFromDiskReqInput in
// python/sglang/srt/managers/io_struct.py), in SGLang v0.5 (weight_version
// since sgl-project/sglang#8795):
//
//	POST /update_weights_from_disk
//	  {"model_path": DIR, "load_format": FORMAT (optional), "weight_version": "N"}
//	  200 {"success": true, "message": "...", "num_paused_requests": 0}
//	  400 {"success": false, "message": "..."}
//	GET /get_model_info
//	  200 {"model_path": DIR, "weight_version": "N", "tokenizer_path": ..., "is_generation": true, ...}
//
// On success SGLang serves the new weights to every request admitted
// after the answer, flushes its radix cache, and from then on reports the
// new model_path (which also becomes its served model name, so a policy
// endpoint for SGLang should leave ?model= out) and weight_version.
type sglangReplica struct {
	s          *httpServer
	loadFormat string
}

func openSGLang(endpoint, loadFormat string, timeout time.Duration) (Replica, error) {
	s, err := openHTTP(endpoint, timeout)
	if err != nil {
		return nil, err
	}
	return sglangReplica{s, loadFormat}, nil
}

// ErrSGLangAdapter is why a LoRA adapter is not pushed to SGLang.
var ErrSGLangAdapter = errors.New("SGLang is not sent LoRA adapters: its /load_lora_adapter " +
	"(LoadLoRAAdapterReqInput: lora_name, lora_path, pinned; SGLang v0.5) loads an adapter under a name not yet loaded " +
	"and has no in-place replacement, so each step's adapter would have to be unloaded and loaded again under the name " +
	"the rollouts ask for, and their requests naming it in between would fail. Push merged checkpoints to SGLang " +
	"(aipo lora merge writes them), or serve the adapter with vLLM (policy.sync.kind vllm, /v1/load_lora_adapter " +
	"with load_inplace) or aipo serve --lora (kind aipo)")

func (r sglangReplica) Push(ctx context.Context, ck Checkpoint) error {
	if peftdir.IsAdapterDir(ck.Dir) {
		return fmt.Errorf("%s is a LoRA adapter: %w", ck.Dir, ErrSGLangAdapter)
	}
	version := strconv.FormatInt(ck.Version, 10)
	body := map[string]any{"model_path": ck.Dir, "weight_version": version}
	if r.loadFormat != "" {
		body["load_format"] = r.loadFormat
	}
	status, b, err := r.s.call(ctx, http.MethodPost, "/update_weights_from_disk", body)
	if err != nil {
		return err
	}
	var ans struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &ans) != nil || ans.Success == nil {
		return fmt.Errorf("POST /update_weights_from_disk answered %d %s, not SGLang's {success, message}: is it an SGLang server?", status, short(b))
	}
	if status != http.StatusOK || !*ans.Success {
		return fmt.Errorf("POST /update_weights_from_disk answered %d, success false: %s", status, ans.Message)
	}
	// The answer only says success: the model info says what is served.
	status, b, err = r.s.call(ctx, http.MethodGet, "/get_model_info", nil)
	if err != nil {
		return fmt.Errorf("the weights were updated, but GET /get_model_info failed: %w", err)
	}
	var info struct {
		ModelPath     string `json:"model_path"`
		WeightVersion string `json:"weight_version"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &info) != nil {
		return fmt.Errorf("GET /get_model_info answered %d %s", status, short(b))
	}
	if info.ModelPath != ck.Dir || info.WeightVersion != version {
		return fmt.Errorf("after the update, GET /get_model_info reports model_path %q and weight_version %q, not %q and %q", info.ModelPath, info.WeightVersion, ck.Dir, version)
	}
	return nil
}

// Serving is the weight_version GET /get_model_info reports.
func (r sglangReplica) Serving(ctx context.Context) (string, error) {
	status, b, err := r.s.call(ctx, http.MethodGet, "/get_model_info", nil)
	if err != nil {
		return "", err
	}
	var info struct {
		WeightVersion string `json:"weight_version"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &info) != nil {
		return "", fmt.Errorf("GET /get_model_info answered %d %s", status, short(b))
	}
	return info.WeightVersion, nil
}

func (r sglangReplica) Close() error { return r.s.close() }
