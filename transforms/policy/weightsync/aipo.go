package weightsync

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
)

// aipoReplica is aipo serve, told through its Reload RPC.
type aipoReplica struct {
	c *grpcclient.Client
}

func openAipo(ctx context.Context, endpoint string) (replica, error) {
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

// push reloads the server and checks the version it answers: the one in
// the checkpoint's trainer_state.json.
func (r aipoReplica) push(ctx context.Context, ck Checkpoint) error {
	v, err := r.c.Reload(ctx, ck.Dir)
	if err != nil {
		return err
	}
	if v != ck.Version {
		return fmt.Errorf("it answered that it now serves policy version %d, not %d: the directory it read is not the checkpoint the learner wrote (check policy.sync.checkpoint_dir)", v, ck.Version)
	}
	return nil
}

// serving is the policy version aipo serve's Health RPC names.
func (r aipoReplica) serving(ctx context.Context) (string, error) {
	info, err := r.c.Info(ctx)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(info.PolicyVersion, 10), nil
}

func (r aipoReplica) close() error { return r.c.Close() }
