package train

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// logProbTol bounds |server - learner| for one token's log-prob: aipo
// serve decodes with a KV cache one token at a time, the learner runs the
// whole sequence through its training forward pass, both in float32 on
// the CPU, so the two sum the same products in different orders (about
// 1e-6 apart on the quick demo's one-layer model); 1e-4 leaves room and
// is still far below what one learner step of this test moves a
// log-prob (checked below).
const logProbTol = 1e-4

// policyServer is `aipo serve` on 127.0.0.1 that a test may restart, on
// the same addresses, from another checkpoint.
type policyServer struct {
	t                  *testing.T
	grpcAddr, httpAddr string
	stop               func()
}

func startPolicyServer(t *testing.T, ckpt string) *policyServer {
	t.Helper()
	gl, hl := listen(t), listen(t)
	s := &policyServer{t: t, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}
	s.stop = serveCheckpoint(t, ckpt, "demo", gl, hl, time.Second)
	t.Cleanup(func() { s.stop() })
	return s
}

// restart stops the server and starts it again on the same addresses,
// serving ckpt (a server that came back with older weights).
func (s *policyServer) restart(ckpt string) {
	s.t.Helper()
	s.stop()
	relisten := func(addr string) net.Listener {
		var err error
		for range 50 {
			var l net.Listener
			if l, err = net.Listen("tcp", addr); err == nil {
				return l
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.t.Fatalf("listen again on %s: %v", addr, err)
		return nil
	}
	s.stop = serveCheckpoint(s.t, ckpt, "demo", relisten(s.grpcAddr), relisten(s.httpAddr), time.Second)
}

// reload makes the server serve dir, as an operator would by hand.
func (s *policyServer) reload(ctx context.Context, dir string) {
	s.t.Helper()
	c, err := policy.Open(ctx, "grpc://"+s.grpcAddr)
	if err != nil {
		s.t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.(*grpcclient.Client).Reload(ctx, dir); err != nil {
		s.t.Fatal(err)
	}
}

// syncRun is a fresh run directory under base whose checkpoint 0 is the
// demo server's warm start, on the quick configuration with a learning
// rate and weight decay large enough that each step moves the log-probs
// well past logProbTol, and without evaluation.
func syncRun(t testing.TB, ds demoServer, base, name string, mutate func(*runconfig.Config)) runconfig.Config {
	t.Helper()
	c := ds.cfg
	c.Run.Dir, c.Data.DeadLetterDir = filepath.Join(base, name), ""
	c.Eval.Every = 0
	// Every checkpoint stays: the tests probe the servers against each.
	c.Checkpoint.KeepLast = 0
	c.Learner.Optim.LR, c.Learner.Optim.WeightDecay = 2e-2, 0.5
	if mutate != nil {
		mutate(&c)
	}
	c.Fill()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	testtools.CopyDirExcept(t, ds.ckpt, rundir.Checkpoint(c.Run.Dir, 0))
	return c
}

// probe greedily samples a fixed prompt from the endpoint and returns the
// tokens, their log-probs and the version the server named.
func probe(t *testing.T, ctx context.Context, endpoint string) (prefix, tokens []int32, lps []float32, version int64) {
	t.Helper()
	c, err := policy.Open(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prefix, err = c.Tokenize(ctx, "what is lugr plus 3?", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Generate(ctx, policy.Request{Prefix: prefix, Params: sampling.Params{Temperature: 0, MaxTokens: 8, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return prefix, res.Tokens, res.LogProbs, res.PolicyVersion
}

// learnerLogProbs is the learner's log-prob of each of cont after prefix,
// under the weights of checkpoint dir.
func learnerLogProbs(t *testing.T, ctx context.Context, dir string, seqs ...[2][]int32) [][]float32 {
	t.Helper()
	pol, err := LoadPolicy(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var b model.Batch
	for _, s := range seqs {
		b.Tokens = append(append(b.Tokens, s[0]...), s[1]...)
		b.SeqLens = append(b.SeqLens, len(s[0])+len(s[1]))
	}
	a, err := pol.Model.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	out := make([][]float32, len(seqs))
	off := 0
	for i, s := range seqs {
		for j := range s[1] {
			out[i] = append(out[i], a.LogProbs[off+len(s[0])-1+j])
		}
		off += len(s[0]) + len(s[1])
	}
	return out
}

// learnRecord is learner step k's metrics on record in the run directory
// dir, which must hold a train-inference mismatch.
func learnRecord(t *testing.T, ctx context.Context, dir string, k int64) records.Learn {
	t.Helper()
	b, err := storage.ReadFile(ctx, rundir.MetricsRecord(dir, rundir.LearnKind, k))
	if err != nil {
		t.Fatal(err)
	}
	var m records.Learn
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Mismatch == nil || m.Mismatch.Tokens == 0 {
		t.Fatalf("learner step %d recorded no train-inference mismatch: %s", k, b)
	}
	return m
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// checkStep reads step k of the run and checks that every trajectory was
// sampled by version want and that the learner's log-probs of its policy
// tokens under that checkpoint equal the sampler's (the train-inference
// mismatch is ~0).
func checkStep(t *testing.T, ctx context.Context, c runconfig.Config, k, want int64) {
	t.Helper()
	trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, k))
	if err != nil {
		t.Fatal(err)
	}
	if len(trajs) != c.Data.BatchSize*c.Rollout.GroupSize {
		t.Fatalf("step %d holds %d trajectories", k, len(trajs))
	}
	var seqs [][2][]int32
	for _, tr := range trajs {
		if tr.PolicyVersion != want {
			t.Errorf("step %d: trajectory %s/%d sampled by version %d, want %d", k, tr.PromptID, tr.SampleIndex, tr.PolicyVersion, want)
		}
		seqs = append(seqs, [2][]int32{tr.PromptIDs, tr.ResponseIDs})
	}
	lps := learnerLogProbs(t, ctx, rundir.Checkpoint(c.Run.Dir, want), seqs...)
	worst, n := 0.0, 0
	for i, tr := range trajs {
		for j, src := range tr.TokenSource {
			if src == schemas.SourcePolicy {
				worst = max(worst, math.Abs(float64(lps[i][j]-tr.BehaviorLogProbs[j])))
				n++
			}
		}
	}
	if n == 0 || worst > logProbTol {
		t.Errorf("step %d: learner and sampler log-probs of %d policy tokens differ by up to %.3g (tolerance %g)", k, n, worst, logProbTol)
	}
	t.Logf("step %d: %d policy tokens, learner vs sampler log-probs within %.2g", k, n, worst)
}

// aipo train for 3 steps with aipo serve as the external policy server,
// over gRPC and over HTTP, told of every checkpoint through its Reload
// RPC: before each rollout the server's weights are the checkpoint's (a
// greedy probe's log-probs equal the learner's, and differ from those of
// the checkpoint before), every trajectory's version is the step's, and
// the learner's log-probs of the sampled tokens equal the sampler's.
func TestTrainWithPolicyServer(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick demo through aipo serve over gRPC and over HTTP")
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	for _, proto := range []string{"grpc", "http"} {
		t.Run(proto, func(t *testing.T) {
			endpoint := "grpc://" + ds.grpcAddr
			if proto == "http" {
				endpoint = "http://" + ds.httpAddr + "/v1?model=demo"
			}
			c := syncRun(t, ds, base, proto, func(c *runconfig.Config) {
				c.Policy.Endpoint = endpoint
				c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo, Endpoints: []string{"grpc://" + ds.grpcAddr}}
			})
			var logs []string
			var prev []float32
			rolled := 0
			err := runWired(claimed(t, ctx, c.Run.Dir), c, Options{
				Log: func(s string) { logs = append(logs, s) },
				Rollout: func(ctx context.Context, rc runconfig.Config, k int64) error {
					if rc.Policy.Endpoint != endpoint {
						t.Errorf("rollout %d samples from %s, not the configured %s", k, rc.Policy.Endpoint, endpoint)
					}
					prefix, toks, lps, v := probe(t, ctx, rc.Policy.Endpoint)
					if v != k {
						t.Errorf("before rollout %d the server names version %d", k, v)
					}
					want := learnerLogProbs(t, ctx, rundir.Checkpoint(c.Run.Dir, k), [2][]int32{prefix, toks})[0]
					if d := maxDiff(lps, want); d > logProbTol {
						t.Errorf("before rollout %d the server's probe log-probs differ from checkpoint %d's by %.3g", k, k, d)
					}
					if prev != nil {
						// The probe tells checkpoints apart: the check above is
						// not passed by a server that kept older weights.
						old := learnerLogProbs(t, ctx, rundir.Checkpoint(c.Run.Dir, k-1), [2][]int32{prefix, toks})[0]
						if d := maxDiff(old, want); d < 100*logProbTol {
							t.Errorf("checkpoints %d and %d give probe log-probs only %.3g apart", k-1, k, d)
						} else {
							t.Logf("step %d: probe log-probs %.2g from checkpoint %d's, %.2g from checkpoint %d's", k, maxDiff(lps, want), k, d, k-1)
						}
					}
					prev = lps
					rolled++
					return rollout.RunStep(ctx, rc, k)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if rolled != int(c.Run.Steps) {
				t.Errorf("%d rollouts, want %d", rolled, c.Run.Steps)
			}
			for k := range c.Run.Steps {
				checkStep(t, ctx, c, k, k)
				// The learner's own measure of the mismatch agrees: ~0.
				if m := learnRecord(t, ctx, c.Run.Dir, k).Mismatch; m.AbsMax > logProbTol {
					t.Errorf("step %d: the learner measured a train-inference mismatch up to %.3g", k, m.AbsMax)
				}
			}
			// After the last step the server serves the final checkpoint.
			if _, _, _, v := probe(t, ctx, endpoint); v != c.Run.Steps {
				t.Errorf("after the run the server names version %d, want %d", v, c.Run.Steps)
			}
			if len(logs) == 0 || !strings.Contains(strings.Join(logs, "\n"), "policy servers (aipo, 1) serve checkpoint 3") {
				t.Errorf("no notice of the pushes: %q", logs)
			}
		})
	}
}

// A server nobody tells of the new checkpoints keeps sampling with old
// weights: the learner refuses the first step it sampled with a version
// the run does not allow, naming the step, the versions and the fix, and
// writes nothing. A server that is told one step late is refused alike,
// and accepted with policy.max_staleness: 1.
func TestStalePolicyServer(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	srv := startPolicyServer(t, ds.ckpt)
	endpoint := "grpc://" + srv.grpcAddr

	t.Run("never told", func(t *testing.T) {
		c := syncRun(t, ds, base, "never-told", func(c *runconfig.Config) { c.Policy.Endpoint = endpoint })
		srv.reload(ctx, rundir.Checkpoint(c.Run.Dir, 0))
		err := runWired(claimed(t, ctx, c.Run.Dir), c, Options{})
		for _, want := range []string{"learn step 1:", "16 of the 16 trajectories were sampled by policy versions outside the version 1 this step allows (policy.max_staleness 0)",
			"versions found (trajectories): 0 (16)", "set policy.sync", "policy.max_staleness: 1", "--step 1 --force", "checkpoint 2 was not written"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want it to say %q", err, want)
			}
		}
		if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(c.Run.Dir, 2)); ok {
			t.Error("checkpoint 2 was written from stale trajectories")
		}
		checkStep(t, ctx, c, 0, 0)
	})

	// The test tells the server of checkpoint k-1 just before rollout k.
	late := func(c runconfig.Config) Options {
		return Options{Rollout: func(ctx context.Context, rc runconfig.Config, k int64) error {
			srv.reload(ctx, rundir.Checkpoint(c.Run.Dir, max(0, k-1)))
			return rollout.RunStep(ctx, rc, k)
		}}
	}
	t.Run("one step late", func(t *testing.T) {
		c := syncRun(t, ds, base, "late", func(c *runconfig.Config) { c.Policy.Endpoint = endpoint })
		err := runWired(claimed(t, ctx, c.Run.Dir), c, late(c))
		if err == nil || !strings.Contains(err.Error(), "learn step 1:") || !strings.Contains(err.Error(), "versions found (trajectories): 0 (16)") {
			t.Errorf("a server one version behind, max_staleness 0: %v", err)
		}
	})
	// Accepted with max_staleness 1, the lag measured by the learner's
	// mismatch metrics and corrected by truncated importance sampling on
	// the behaviour ratio.
	t.Run("one step late, max_staleness 1, corrected", func(t *testing.T) {
		one := int64(1)
		c := syncRun(t, ds, base, "late-allowed", func(c *runconfig.Config) {
			c.Policy.Endpoint = endpoint
			c.Policy.MaxStaleness = &one
			c.Learner.Loss.RolloutCorrection = loss.RolloutCorrection{Level: loss.CorrectionToken, Cap: 1.01, Mode: loss.CorrectionTruncate}
		})
		if err := runWired(claimed(t, ctx, c.Run.Dir), c, late(c)); err != nil {
			t.Fatal(err)
		}
		for k := range c.Run.Steps {
			checkStep(t, ctx, c, k, max(0, k-1))
			m := learnRecord(t, ctx, c.Run.Dir, k)
			w, on := m.LossMetrics["rollout_is_weight_mean"]
			switch {
			case !on:
				t.Errorf("step %d: no rollout correction on record: %v", k, m.LossMetrics)
			case k == 0 && (m.Mismatch.AbsMax > logProbTol || math.Abs(w-1) > logProbTol):
				t.Errorf("step 0 (on-policy): mismatch up to %.3g, mean weight %v", m.Mismatch.AbsMax, w)
			case k > 0 && (m.Mismatch.AbsMean < 100*logProbTol || m.LossMetrics["rollout_is_frac_high"] == 0):
				t.Errorf("step %d (one version behind): mismatch %.3g on average, %v of the weights truncated", k, m.Mismatch.AbsMean, m.LossMetrics["rollout_is_frac_high"])
			default:
				t.Logf("step %d: mismatch |delta| mean %.3g max %.3g, mean weight %.4f, truncated %.2f", k, m.Mismatch.AbsMean, m.Mismatch.AbsMax, w, m.LossMetrics["rollout_is_frac_high"])
			}
		}
	})
}

// A policy server restarted between the push of checkpoint 2 and the end
// of rollout 2, back on checkpoint 0's weights: the versions it names give
// it away, the learner refuses step 2, and aipo train pushes checkpoint 2
// again, rolls the step out again and goes on, so that every trajectory
// of the run is its step's. A server that comes back on old weights at
// every attempt fails the run after ResampleAttempts, saying so.
func TestRestartedPolicyServerRecovered(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick demo through restarted policy servers")
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	srv := startPolicyServer(t, ds.ckpt)
	run := func(name string, restarts int) (runconfig.Config, []string, error) {
		c := syncRun(t, ds, base, name, func(c *runconfig.Config) {
			c.Policy.Endpoint = "http://" + srv.httpAddr + "/v1?model=demo"
			c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo, Endpoints: []string{"grpc://" + srv.grpcAddr}}
		})
		var logs []string
		done := 0
		err := runWired(claimed(t, ctx, c.Run.Dir), c, Options{Log: func(s string) { logs = append(logs, s) }, Rollout: func(ctx context.Context, rc runconfig.Config, k int64) error {
			if k == 2 && done < restarts {
				done++
				srv.restart(ds.ckpt)
			}
			return rollout.RunStep(ctx, rc, k)
		}})
		return c, logs, err
	}

	t.Run("once", func(t *testing.T) {
		c, logs, err := run("restarted-once", 1)
		if err != nil {
			t.Fatalf("a server restarted once on old weights mid-step: %v", err)
		}
		text := strings.Join(logs, "\n")
		for _, want := range []string{"warning: step 2 was sampled in part by policy versions [0], not by checkpoint 2", "rolling step 2 out again (attempt 1 of 3)"} {
			if !strings.Contains(text, want) {
				t.Errorf("the log does not say %q:\n%s", want, text)
			}
		}
		for k := range c.Run.Steps {
			checkStep(t, ctx, c, k, k)
		}
	})
	t.Run("every time", func(t *testing.T) {
		c, _, err := run("restarted-always", 100)
		if err == nil || !strings.Contains(err.Error(), "learn step 2:") || !strings.Contains(err.Error(), "versions found (trajectories): 0 (16)") ||
			!strings.Contains(err.Error(), "rolled step 2 out again 3 times") {
			t.Errorf("a server back on old weights at every attempt: %v", err)
		}
		if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(c.Run.Dir, 3)); ok {
			t.Error("checkpoint 3 was written")
		}
	})
}

// Bad input around the policy servers: an unreachable policy server fails
// the step within policy.timeout, named; a sync endpoint that answers an
// error fails before the step starts, and the same run resumes once it is
// fixed.
func TestPolicyServerBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo against failing policy servers")
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, endpoint := range []string{"grpc://" + deadAddr, "http://" + deadAddr + "/v1?model=demo"} {
		c := syncRun(t, ds, base, "unreachable-"+endpoint[:4], func(c *runconfig.Config) {
			c.Policy.Endpoint = endpoint
			c.Policy.Timeout = 1500 * time.Millisecond
		})
		lctx := claimed(t, ctx, c.Run.Dir)
		start := time.Now()
		err := runWired(lctx, c, Options{})
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "rollout of step 0") || !strings.Contains(err.Error(), deadAddr) ||
			!strings.Contains(err.Error(), "did not answer within policy.timeout 1.5s") {
			t.Errorf("unreachable %s: %v", endpoint, err)
		}
		if took > 10*time.Second {
			t.Errorf("unreachable %s: failed after %v, policy.timeout is 1.5s", endpoint, took)
		}
		if _, err := os.Stat(rundir.Step(c.Run.Dir, 0)); err == nil {
			t.Errorf("unreachable %s: step 0 was written", endpoint)
		}
	}

	// aipo serve answers the push with an error: the directory it was told
	// to load is not there (policy.sync.checkpoint_dir names another place).
	c := syncRun(t, ds, base, "sync-error", func(c *runconfig.Config) {
		c.Policy.Endpoint = "grpc://" + ds.grpcAddr
		c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo, CheckpointDir: filepath.Join(base, "elsewhere", "checkpoints")}
	})
	rolled := 0
	opts := Options{Rollout: func(ctx context.Context, rc runconfig.Config, k int64) error {
		rolled++
		return rollout.RunStep(ctx, rc, k)
	}}
	lctx := claimed(t, ctx, c.Run.Dir)
	err := runWired(lctx, c, opts)
	if err == nil || !strings.Contains(err.Error(), "step 0 not started") || !strings.Contains(err.Error(), ds.grpcAddr) ||
		!strings.Contains(err.Error(), filepath.Join(base, "elsewhere", "checkpoints", "step-000000")) || !strings.Contains(err.Error(), "run the same command again") {
		t.Errorf("a push the server refuses: %v", err)
	}
	if rolled != 0 {
		t.Errorf("%d rollouts ran after a failed push", rolled)
	}
	if _, err := os.Stat(rundir.Step(c.Run.Dir, 0)); err == nil {
		t.Error("step 0 was written after a failed push")
	}
	c.Policy.Sync.CheckpointDir = ""
	if err := runWired(lctx, c, opts); err != nil {
		t.Fatalf("the run does not resume once the push works: %v", err)
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(c.Run.Dir, c.Run.Steps)); !ok || rolled != int(c.Run.Steps) {
		t.Errorf("resumed run: final checkpoint committed %v, %d rollouts", ok, rolled)
	}
	for k := range c.Run.Steps {
		checkStep(t, ctx, c, k, k)
	}
}

// The asynchronous loop with aipo serve told of every checkpoint: step k
// is sampled while learner step k-1 runs, so its trajectories are one
// version behind (or, once the server is told of checkpoint k during the
// rollout, on it), which the default max_staleness of an asynchronous run
// allows.
func TestAsyncTrainWithPolicyServer(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	c := syncRun(t, ds, base, "async", func(c *runconfig.Config) {
		c.Run.Async = true
		c.Policy.Endpoint = "grpc://" + ds.grpcAddr
		c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo}
		c.Rollout.MaxInFlight = 2 * c.Data.BatchSize * c.Rollout.GroupSize
		c.Learner.Loss.RolloutCorrection = loss.RolloutCorrection{Level: loss.CorrectionToken, Cap: 2, Mode: loss.CorrectionTruncate}
	})
	if err := runWired(claimed(t, ctx, c.Run.Dir), c, Options{}); err != nil {
		t.Fatal(err)
	}
	for k := range c.Run.Steps {
		trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, k))
		if err != nil {
			t.Fatal(err)
		}
		lagged := 0
		for _, tr := range trajs {
			if v := tr.PolicyVersion; v < max(0, k-1) || v > k {
				t.Errorf("step %d: trajectory sampled by version %d", k, v)
			} else if v < k {
				lagged++
			}
		}
		// The learner measures the lag and weighs it by the rollout
		// correction.
		m := learnRecord(t, ctx, c.Run.Dir, k)
		if _, on := m.LossMetrics["rollout_is_weight_mean"]; !on {
			t.Errorf("step %d: no rollout correction on record", k)
		}
		if lagged == len(trajs) && m.Mismatch.AbsMean < 100*logProbTol {
			t.Errorf("step %d, sampled one version behind: mismatch only %.3g", k, m.Mismatch.AbsMean)
		}
		t.Logf("step %d: %d of %d trajectories one version behind, mismatch |delta| mean %.3g", k, lagged, len(trajs), m.Mismatch.AbsMean)
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(c.Run.Dir, c.Run.Steps)); !ok {
		t.Error("final checkpoint not committed")
	}
}
