// Package weightsync tells the policy servers of a run to serve a new
// checkpoint, and checks that each did, before sampling resumes. The
// servers read the checkpoint directory themselves (shared storage, or
// gs:// for aipo serve); nothing is polled.
//
// A Group holds every replica of a run, all of one kind, and pushes a
// checkpoint to all of them at once: a push succeeds when every replica's
// answer says it now serves the checkpoint, and fails, naming each
// replica that did not, otherwise. Each replica's push is bounded by
// Options.Timeout, retries included.
//
// Kinds and the answers checked:
//
//   - aipo: aipo serve's Reload RPC (schemas/proto/aipo/v1/policy.proto)
//     at grpc://host:port; the answer's policy_version must be the
//     checkpoint's (its trainer_state.json policy_version).
//   - sglang: SGLang's POST /update_weights_from_disk with {model_path,
//     weight_version, load_format?}; the answer must be 200 with
//     {"success": true}, and GET /get_model_info must then report the
//     checkpoint as model_path and its version as weight_version. SGLang
//     also names weight_version in each completion's metadata, which the
//     HTTP policy client records as the trajectory's policy version.
//   - vllm: vLLM's POST /collective_rpc with {"method": "reload_weights",
//     "kwargs": {"weights_path": DIR}} (the server runs with
//     VLLM_SERVER_DEV_MODE=1); the answer must be 200 with one null result
//     per worker, then POST /reset_prefix_cache (200) drops the KV cache
//     of the old weights; the log-probs of a fixed probe must have moved
//     when the server served another version before; POST
//     /update_weight_version sets the version, which GET /weight_info
//     then names (and the HTTP policy client reads after each
//     completion). A vLLM without those routes names no version: the
//     rollout's endpoint carries the pushed version (policy_version=N).
//
// The request and answer shapes, and the versions they were read from, are
// given beside each client (sglang.go, vllm.go).
package weightsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/secure"
)

// Kinds of policy servers, as policy.sync.kind names them; KindNone (or
// an empty kind) tells no server of new checkpoints.
const (
	KindNone   = "none"
	KindAipo   = "aipo"
	KindSGLang = "sglang"
	KindVLLM   = "vllm"
)

// Checkpoint is what a push serves: its directory as the servers see it,
// and its policy version.
type Checkpoint struct {
	Dir     string
	Version int64
}

// Options tune a Group.
type Options struct {
	// Timeout bounds one push to one replica, retries and the check of
	// the answer included (0: 10 minutes).
	Timeout time.Duration
	// LoadFormat is SGLang's load_format ("" leaves the server's).
	LoadFormat string
}

// replica is one server of a group.
type replica interface {
	push(ctx context.Context, ck Checkpoint) error
	close() error
}

// Group is the replicas of one run.
type Group struct {
	kind      string
	endpoints []string // redacted, for messages
	replicas  []replica
	timeout   time.Duration
}

// Open connects to every endpoint (no request is sent yet).
func Open(ctx context.Context, kind string, endpoints []string, o Options) (*Group, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("weightsync: no %s endpoint to push checkpoints to", kind)
	}
	g := &Group{kind: kind, timeout: o.Timeout}
	if g.timeout <= 0 {
		g.timeout = 10 * time.Minute
	}
	for _, e := range endpoints {
		var r replica
		var err error
		switch kind {
		case KindAipo:
			r, err = openAipo(ctx, e)
		case KindSGLang:
			r, err = openSGLang(e, o.LoadFormat, g.timeout)
		case KindVLLM:
			r, err = openVLLM(e, g.timeout)
		default:
			err = fmt.Errorf("unknown kind %q (aipo, sglang or vllm)", kind)
		}
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("weightsync: %s server %s: %w", kind, secure.RedactURI(e), err)
		}
		g.replicas = append(g.replicas, r)
		g.endpoints = append(g.endpoints, secure.RedactURI(e))
	}
	return g, nil
}

// Kind is the group's server kind.
func (g *Group) Kind() string { return g.kind }

// Endpoints are the replicas' addresses, secrets redacted.
func (g *Group) Endpoints() []string { return append([]string(nil), g.endpoints...) }

// Push makes every replica serve ck, all at once, and returns when each
// has answered or its timeout has passed. The error names every replica
// that failed and why.
func (g *Group) Push(ctx context.Context, ck Checkpoint) error {
	errs := make([]error, len(g.replicas))
	var wg sync.WaitGroup
	for i, r := range g.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, g.timeout)
			defer cancel()
			err := r.push(pctx, ck)
			if err != nil && ctx.Err() == nil && (pctx.Err() != nil || unreachable(err)) {
				err = fmt.Errorf("no answer within policy.sync.timeout %v: %w", g.timeout, err)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s server %s did not load checkpoint %s (policy version %d): %w", g.kind, g.endpoints[i], ck.Dir, ck.Version, err)
			}
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	return fmt.Errorf("%d of %d replicas failed: %w", len(failed), len(g.replicas), errors.Join(failed...))
}

// NamesVersions reports whether every replica names the version it
// serves in its answers (aipo serve, SGLang, and a vLLM whose last push
// set its weight_version); when one does not, the rollout's endpoint must
// carry the pushed version (policy_version=N).
func (g *Group) NamesVersions() bool {
	for _, r := range g.replicas {
		if v, ok := r.(interface{ namesVersions() bool }); ok && !v.namesVersions() {
			return false
		}
	}
	return true
}

// Close closes every replica's connection.
func (g *Group) Close() error {
	var errs []error
	for _, r := range g.replicas {
		errs = append(errs, r.close())
	}
	return errors.Join(errs...)
}

// unreachable reports whether err says the server could not be reached
// (retried until the timeout or the retry budget ran out).
func unreachable(err error) bool {
	return transientNet(err) || status.Code(err) == codes.Unavailable
}

// short trims a server's message for an error.
func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// server is a replica that can say which version it serves now.
type server interface {
	// serving is the version the server names ("" when it names none,
	// or cannot say).
	serving(ctx context.Context) (string, error)
}

// Stale asks every replica that names its version which one it serves,
// and returns a description of each that does not serve version: one
// restarted since (on its startup weights: vLLM's weight_version
// "default"), or told of another checkpoint by someone else. A replica
// that names no version cannot be judged and is left out; one that does
// not answer within the group's timeout is an error.
func (g *Group) Stale(ctx context.Context, version int64) ([]string, error) {
	want := strconv.FormatInt(version, 10)
	out := make([]string, len(g.replicas))
	errs := make([]error, len(g.replicas))
	var wg sync.WaitGroup
	for i, r := range g.replicas {
		s, ok := r.(server)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, g.timeout)
			defer cancel()
			got, err := s.serving(sctx)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s server %s did not say which version it serves: %w", g.kind, g.endpoints[i], err)
			case got != "" && got != want:
				out[i] = fmt.Sprintf("%s server %s serves version %q, not %s", g.kind, g.endpoints[i], got, want)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var stale []string
	for _, s := range out {
		if s != "" {
			stale = append(stale, s)
		}
	}
	return stale, nil
}
