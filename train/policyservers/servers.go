// Package policyservers keeps the policy servers of a run whose policy is
// not in this process on the checkpoint each rollout samples: it pushes
// checkpoints to them (policy.sync, through the kinds of
// transforms/policy/weightsync), pushes again to a server restarted on
// older weights, names the version in the endpoint of a server that names
// none, and checks that the server answers before a step is rolled out.
// The training loop reaches them as train.Options.Servers; aipo rollout
// through PushForRollout.
package policyservers

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// Servers are the policy servers of one run.
type Servers struct {
	cfg runconfig.Config
	log func(string)

	group  *weightsync.Group // nil: nobody is told (in-process policy, or policy.sync none)
	pushMu sync.Mutex
	pushed int64 // the checkpoint the servers were last told to serve; -1 none yet
	// base is a LoRA run's frozen base as vLLM sees it (baseDir), pushed
	// as whole weights before the first adapter this process pushes and
	// again to a restarted server: an adapter is pushed alone, and vLLM
	// started on another model would apply it to that one unseen.
	base string
}

// Open reaches the policy servers of cfg: those of policy.sync when its
// kind pushes checkpoints, none otherwise (the servers sample with the
// weights they serve). log receives one line per push; nil drops them.
// Close them when the run ends.
func Open(ctx context.Context, cfg runconfig.Config, log func(string)) (*Servers, error) {
	s := &Servers{cfg: cfg, log: log, pushed: -1}
	if cfg.InProcessPolicy() || !cfg.Policy.Sync.Pushes() {
		return s, nil
	}
	g, err := weightsync.Open(ctx, cfg.Policy.Sync.Kind, cfg.SyncEndpoints(),
		weightsync.Options{Timeout: cfg.Policy.Sync.TimeoutOrDefault(), LoadFormat: cfg.Policy.Sync.LoadFormat, Adapter: endpointModel(cfg.Policy.Endpoint),
			Interrupt: cfg.Rollout.Partial && cfg.Policy.Sync.Kind == servers.VLLM})
	if err != nil {
		return nil, fmt.Errorf("train: policy.sync: %w", err)
	}
	s.group = g
	if cfg.Learner.LoRA != nil && g.Kind() == "vllm" {
		s.base = baseDir(cfg)
	}
	return s, nil
}

// baseDir is a LoRA run's base (<run>/lora-base) as the servers see it:
// beside policy.sync.checkpoint_dir (the run's checkpoints directory as
// they see it), else the run's own, made absolute.
func baseDir(cfg runconfig.Config) string {
	if root := cfg.Policy.Sync.CheckpointDir; root != "" {
		return storage.Join(storage.Dir(root), filepath.Base(rundir.LoRABase(cfg.Run.Dir)))
	}
	dir := rundir.LoRABase(cfg.Run.Dir)
	if !storage.IsRemote(dir) {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	return dir
}

// pushCheckpoint pushes checkpoint cp to every server; fresh says the
// servers may serve another base than the run's (nothing pushed by this
// process yet, or a server restarted): a LoRA run's base goes first, under
// cp's version (the adapter of checkpoint 0 starts at zero, so the probe
// after it matches the base's).
func (s *Servers) pushCheckpoint(ctx context.Context, cp int64, fresh bool) error {
	if s.base != "" && fresh {
		if err := s.group.Push(ctx, weightsync.Checkpoint{Dir: s.base, Version: cp}); err != nil {
			return fmt.Errorf("the LoRA run's base %s: %w", s.base, err)
		}
		if s.log != nil {
			s.log(fmt.Sprintf("policy servers (%s, %d) serve the LoRA run's base", s.group.Kind(), len(s.group.Endpoints())))
		}
	}
	return s.group.Push(ctx, weightsync.Checkpoint{Dir: checkpointDir(s.cfg, cp), Version: cp})
}

// Close closes the connections to the servers.
func (s *Servers) Close() {
	if s.group != nil {
		s.group.Close()
	}
}

// Serve tells the servers to serve checkpoint cp before step k is rolled
// out, unless they were told already (pushes only go forward). Nothing of
// step k is written when it fails.
func (s *Servers) Serve(ctx context.Context, k, cp int64) error {
	if err := s.recheck(ctx, k); err != nil {
		return fmt.Errorf("train: step %d not started: policy.sync: %w; nothing of step %d was written: fix the server (or policy.sync), then run the same command again to resume", k, err, k)
	}
	if err := s.push(ctx, cp); err != nil {
		return fmt.Errorf("train: step %d not started: policy.sync: %w; nothing of step %d was written: fix the server (or policy.sync), then run the same command again to resume", k, err, k)
	}
	return nil
}

// push makes the servers serve checkpoint cp, unless they do already.
func (s *Servers) push(ctx context.Context, cp int64) error {
	if s.group == nil {
		return nil
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	if s.pushed >= cp {
		return nil
	}
	if err := s.pushCheckpoint(ctx, cp, s.pushed < 0); err != nil {
		return err
	}
	s.pushed = cp
	if s.log != nil {
		s.log(fmt.Sprintf("policy servers (%s, %d) serve checkpoint %d", s.group.Kind(), len(s.group.Endpoints()), cp))
	}
	return nil
}

// recheck asks the servers that name their version whether they still
// serve the checkpoint they were last told of, before step k is rolled
// out, and pushes it again to all of them when one does not: a server
// restarted since serves its startup weights (vLLM's weight_version
// "default"), and a rollout on it would be refused by the learner.
func (s *Servers) recheck(ctx context.Context, k int64) error {
	if s.group == nil {
		return nil
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	v := s.pushed
	if v < 0 {
		return nil
	}
	stale, err := s.group.Stale(ctx, v)
	if err != nil || len(stale) == 0 {
		return err
	}
	if s.log != nil {
		s.log(fmt.Sprintf("policy.sync: %s (restarted since the push?): pushing checkpoint %d again before step %d is rolled out", strings.Join(stale, "; "), v, k))
	}
	return s.pushCheckpoint(ctx, v, true)
}

// Forget makes the next push of any checkpoint reach the servers, as if
// they had been told of none.
func (s *Servers) Forget() {
	s.pushMu.Lock()
	s.pushed = -1
	s.pushMu.Unlock()
}

// Finish tells the servers to serve the run's final checkpoint.
func (s *Servers) Finish(ctx context.Context) error {
	return s.push(ctx, s.cfg.Run.Steps)
}

// checkpointDir is checkpoint k's directory as the policy servers see it:
// under policy.sync.checkpoint_dir, else the run's own, made absolute
// (the servers do not share the working directory).
func checkpointDir(cfg runconfig.Config, k int64) string {
	root := cfg.Policy.Sync.CheckpointDir
	if root == "" {
		root = rundir.Checkpoints(cfg.Run.Dir)
		if !storage.IsRemote(root) {
			if abs, err := filepath.Abs(root); err == nil {
				root = abs
			}
		}
	}
	return rundir.CheckpointIn(root, k)
}

// Endpoint is the policy endpoint a rollout of step k on checkpoint cp
// uses, once the server there answered (Reachable).
func (s *Servers) Endpoint(ctx context.Context, k, cp int64) (string, error) {
	e := s.endpointFor(cp)
	return e, Reachable(ctx, s.cfg, e, k)
}

// endpointFor is the policy endpoint a rollout on checkpoint cp uses: the
// configured one, with policy_version=cp when a server pushed names no
// version (a vLLM without /weight_info; the push confirmed it serves cp).
// Servers that name their version are left to name it, so that one
// restarted on its startup weights is not taken for checkpoint cp. Under
// rollout.partial a vLLM's endpoint gets partial=true: its pushes stop
// the completions in flight, and the client labels each answer by the
// version read before and after it (transforms/policy/httpclient).
func (s *Servers) endpointFor(cp int64) string {
	e := s.cfg.Policy.Endpoint
	partial := s.group != nil && s.cfg.Rollout.Partial && s.group.Kind() == servers.VLLM
	if s.group == nil || s.group.NamesVersions() && !partial {
		return e
	}
	u, err := url.Parse(e)
	if err != nil {
		return e
	}
	q := u.Query()
	if !s.group.NamesVersions() {
		q.Set("policy_version", strconv.FormatInt(cp, 10))
	}
	if partial {
		q.Set("partial", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Reachable checks that the policy server at endpoint answers before step
// k is rolled out, within policy.timeout, so that a server that is down
// fails the step at once, by name, instead of every trajectory.
func Reachable(ctx context.Context, cfg runconfig.Config, endpoint string, k int64) error {
	t := cfg.Policy.Timeout
	if t <= 0 {
		t = 10 * time.Minute
	}
	cctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	c, err := policy.Open(cctx, endpoint)
	if err == nil {
		_, err = c.Info(cctx)
		c.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the policy server %s did not answer within policy.timeout %v: %w; start it or fix policy.endpoint, then run the same command again (nothing of step %d was written)",
			secure.RedactURI(endpoint), t, secure.RedactError(err), k)
	}
	return nil
}

// PushForRollout makes the policy servers of cfg (policy.sync) serve the
// newest committed checkpoint up to k before `aipo rollout --step k`
// samples from them (checkpoint k, or k-1 while an asynchronous run has
// not written k yet), as `aipo train` does before its own rollouts, and
// returns that checkpoint and the policy endpoint the rollout uses (with
// policy_version=N for a server that names no version). So a step the
// learner refused because a server was restarted on older weights is
// rolled out again, with --force, from the right weights. Without
// policy.sync, or with an in-process policy, it pushes nothing and
// returns -1 and the configured endpoint; so it does, saying so, when no
// checkpoint up to k is committed (a first rollout before aipo train wrote
// checkpoint 0).
func PushForRollout(ctx context.Context, cfg runconfig.Config, k int64, log func(string)) (int64, string, error) {
	s, err := Open(ctx, cfg, log)
	if err != nil {
		return -1, "", err
	}
	defer s.Close()
	if s.group == nil {
		return -1, cfg.Policy.Endpoint, nil
	}
	for cp := k; cp >= 0 && cp >= k-1; cp-- {
		ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(cfg.Run.Dir, cp))
		if err != nil {
			return -1, "", err
		}
		if !ok {
			continue
		}
		if err := s.push(ctx, cp); err != nil {
			return -1, "", fmt.Errorf("policy.sync: %w; nothing of step %d was written", err, k)
		}
		return cp, s.endpointFor(cp), nil
	}
	if log != nil {
		log(fmt.Sprintf("policy.sync: no checkpoint up to %d is committed in %s, so the servers are not told of one and sample with the weights they serve", k, cfg.Run.Dir))
	}
	return -1, cfg.Policy.Endpoint, nil
}

// endpointModel is the ?model= of the policy endpoint: the name a LoRA
// run's adapters are loaded under on a server that takes them at run
// time, as the rollouts ask for it ("" when it names none).
func endpointModel(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return u.Query().Get("model")
}
