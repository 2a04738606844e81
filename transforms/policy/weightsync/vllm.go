package weightsync

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// vllmReplica is a vLLM OpenAI-compatible server started with
// VLLM_SERVER_DEV_MODE=1, told through its development endpoints.
//
// The contract, as vLLM implements it (vllm/entrypoints/serve/dev/rpc/api_router.py,
// POST /collective_rpc, and vllm/entrypoints/serve/cache/api_router.py,
// POST /reset_prefix_cache, mounted only when VLLM_SERVER_DEV_MODE is set;
// the worker method reload_weights(weights_iterator=None, weights_path=None,
// is_checkpoint_format=True) of vllm/v1/worker/gpu_model_runner.py, which
// came with layerwise reloading, vllm-project/vllm#32133, and is documented
// at https://docs.vllm.ai/en/latest/training/layerwise/), read at
// vllm-project/vllm commit 35d5cda (2026):
//
//	POST /collective_rpc
//	  {"method": "reload_weights", "kwargs": {"weights_path": DIR}}
//	  200 {"results": [null, ...]}   one result per worker; reload_weights returns None
//	  400 {"error": ...} / 500        a malformed request, or a worker's exception
//	POST /reset_prefix_cache
//	  200 (no body)
//
// The args and kwargs of /collective_rpc are strings only, which
// weights_path is. reload_weights reads the checkpoint with the server's
// load format and copies it into the running model; resetting the prefix
// cache drops KV blocks computed with the old weights. vLLM reports no
// weight version, neither here nor in its completions.
type vllmReplica struct {
	s *httpServer
}

func openVLLM(endpoint string) (replica, error) {
	s, err := openHTTP(endpoint)
	if err != nil {
		return nil, err
	}
	return vllmReplica{s}, nil
}

func (r vllmReplica) push(ctx context.Context, ck Checkpoint) error {
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
	status, b, err = r.s.call(ctx, http.MethodPost, "/reset_prefix_cache", nil)
	if err != nil {
		return fmt.Errorf("the weights were reloaded, but POST /reset_prefix_cache failed: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("the weights were reloaded, but POST /reset_prefix_cache answered %d %s", status, short(b))
	}
	return nil
}

func (r vllmReplica) close() error { return r.s.close() }
