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
// Each kind of server registers itself (Register) beside its client:
// aipo.go (aipo serve's Reload RPC), sglang.go (SGLang's
// /update_weights_from_disk), vllm.go (vLLM's /collective_rpc
// reload_weights), each with the request and answer shapes it checks and
// the versions they were read from; KindNone tells no server.
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

// Checkpoint is what a push serves: its directory as the servers see it,
// and its policy version. A directory that holds a PEFT LoRA adapter
// (peftdir.IsAdapterDir: a checkpoint of a LoRA run) is pushed as an
// adapter: the servers load the adapter alone, megabytes, on the base
// they serve (vLLM's /v1/load_lora_adapter, aipo serve --lora's Reload);
// a kind that cannot take one refuses it, saying why.
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
	// Adapter is the model name a LoRA run's adapters are loaded under on
	// a server that takes adapters at run time (vLLM's
	// /v1/load_lora_adapter): the name its rollouts ask for, the policy
	// endpoint's ?model=.
	Adapter string
	// Interrupt stops the server's generations in flight at each push
	// (rollout.partial): vLLM is paused with POST /pause?mode=abort
	// before the load, which ends every request with finish reason abort
	// and the tokens sampled so far, and resumed once the new version is
	// set. Kinds that cannot do so refuse it at Open.
	Interrupt bool
}

// Replica is one server of a group, as its kind's Open connects to it.
type Replica interface {
	// Push makes the server serve ck and checks that it does.
	Push(ctx context.Context, ck Checkpoint) error
	Close() error
}

// Serving is a Replica that can say which version it serves now.
type Serving interface {
	// Serving is the version the server names ("" when it names none,
	// or cannot say).
	Serving(ctx context.Context) (string, error)
}

// Versioned is a Replica of a kind whose servers do not always name the
// version they serve (Kind.NamesVersions false): NamesVersions reports
// whether this one does since its last push.
type Versioned interface {
	NamesVersions() bool
}

// Group is the replicas of one run.
type Group struct {
	kind      Kind
	endpoints []string // redacted, for messages
	replicas  []Replica
	timeout   time.Duration
}

// Open connects to every endpoint of a server of the kind called kind (no
// request is sent yet).
func Open(ctx context.Context, kind string, endpoints []string, o Options) (*Group, error) {
	k, err := Lookup(kind)
	if err != nil {
		return nil, fmt.Errorf("weightsync: kind %w", err)
	}
	if !k.Pushes() {
		return nil, fmt.Errorf("weightsync: kind %s tells no server of checkpoints", k.Name)
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("weightsync: no %s endpoint to push checkpoints to", k.Name)
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	g := &Group{kind: k, timeout: o.Timeout}
	for _, e := range endpoints {
		r, err := k.Open(ctx, e, o)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("weightsync: %s server %s: %w", k.Name, secure.RedactURI(e), err)
		}
		g.replicas = append(g.replicas, r)
		g.endpoints = append(g.endpoints, secure.RedactURI(e))
	}
	return g, nil
}

// Kind is the name of the group's server kind.
func (g *Group) Kind() string { return g.kind.Name }

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
			err := r.Push(pctx, ck)
			if err != nil && ctx.Err() == nil && (pctx.Err() != nil || unreachable(err)) {
				err = fmt.Errorf("no answer within policy.sync.timeout %v: %w", g.timeout, err)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s server %s did not load checkpoint %s (policy version %d): %w", g.kind.Name, g.endpoints[i], ck.Dir, ck.Version, err)
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
// serves in its answers (a kind whose servers always do: aipo serve,
// SGLang; else each replica since its last push: a vLLM whose last push
// set its weight_version); when one does not, the rollout's endpoint must
// carry the pushed version (policy_version=N).
func (g *Group) NamesVersions() bool {
	if g.kind.NamesVersions {
		return true
	}
	for _, r := range g.replicas {
		if v, ok := r.(Versioned); !ok || !v.NamesVersions() {
			return false
		}
	}
	return true
}

// Close closes every replica's connection.
func (g *Group) Close() error {
	var errs []error
	for _, r := range g.replicas {
		errs = append(errs, r.Close())
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
		s, ok := r.(Serving)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, g.timeout)
			defer cancel()
			got, err := s.Serving(sctx)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s server %s did not say which version it serves: %w", g.kind.Name, g.endpoints[i], err)
			case got != "" && got != want:
				out[i] = fmt.Sprintf("%s server %s serves version %q, not %s", g.kind.Name, g.endpoints[i], got, want)
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
