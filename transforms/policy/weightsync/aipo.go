package weightsync

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

func init() {
	Register(Kind{
		Name:          servers.Aipo,
		Protocol:      "aipo serve's Reload RPC",
		Schemes:       []string{"grpc", "grpcs"},
		Example:       "grpc://10.0.0.5:7070",
		Sends:         "`aipo serve`'s `Reload` RPC on its gRPC address with the checkpoint directory (local or `gs://`); a LoRA run's adapter directory replaces the adapter of `aipo serve --lora`",
		Checks:        "the answer's `policy_version` is the checkpoint's",
		NamesVersions: true,
		Open: func(ctx context.Context, endpoint string, _ Options) (Replica, error) {
			return openAipo(ctx, endpoint)
		},
	})
}

// aipoReplica is aipo serve, told through its Reload RPC.
type aipoReplica struct {
	c *grpcclient.Client
}

func openAipo(ctx context.Context, endpoint string) (Replica, error) {
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "grpc" && u.Scheme != "grpcs") {
		return nil, fmt.Errorf("not a gRPC endpoint (grpc://host:port or grpcs://host:port): aipo serve's Reload RPC is on its gRPC listener")
	}
	c, err := policy.Open(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	gc, ok := c.(*grpcclient.Client)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("not a gRPC endpoint (grpc://host:port or grpcs://host:port)")
	}
	return aipoReplica{gc}, nil
}

// Push reloads the server and checks the version it answers: the one in
// the checkpoint's trainer_state.json.
func (r aipoReplica) Push(ctx context.Context, ck Checkpoint) error {
	v, err := r.c.Reload(ctx, ck.Dir)
	if err != nil {
		return err
	}
	if v != ck.Version {
		return fmt.Errorf("it answered that it now serves policy version %d, not %d: the directory it read is not the checkpoint the learner wrote (check policy.sync.checkpoint_dir)", v, ck.Version)
	}
	return nil
}

// Serving is the policy version aipo serve's Health RPC names.
func (r aipoReplica) Serving(ctx context.Context) (string, error) {
	info, err := r.c.Info(ctx)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(info.PolicyVersion, 10), nil
}

func (r aipoReplica) Close() error { return r.c.Close() }
