package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// child is a quick demo running in its own process.
type child struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	marks  chan string // phase names as the child prints them
	done   chan error
}

// startChild starts the quick demo in dir (see runChildIfAsked) without
// waiting for it.
func startChild(t *testing.T, dir string) *child {
	t.Helper()
	c := &child{marks: make(chan string, 256), done: make(chan error, 1)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+dir)
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PHASE "); ok {
				select {
				case c.marks <- p:
				default:
				}
			}
		}
		c.done <- c.cmd.Wait()
	}()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// wait waits for the child to end, at most limit.
func (c *child) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(limit):
		_ = c.cmd.Process.Kill()
		t.Fatalf("the child ran past %s; stderr:\n%s", limit, c.stderr.String())
		return nil
	}
}

// checkRunIntact reads every committed step of a finished quick demo
// through its manifest (every listed shard present, sha256 verified) and
// the final checkpoint.
func checkRunIntact(t *testing.T, run string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := range cfg.Run.Steps {
		rows, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(run, k))
		if err != nil {
			t.Errorf("step %d of %s: %v", k, run, err)
			continue
		}
		if want := cfg.Data.BatchSize * cfg.Rollout.GroupSize; len(rows) != want {
			t.Errorf("step %d of %s holds %d trajectories, want %d", k, run, len(rows), want)
		}
	}
	if _, err := LoadPolicy(ctx, rundir.Checkpoint(run, cfg.Run.Steps)); err != nil {
		t.Errorf("final checkpoint of %s: %v", run, err)
	}
}

// Two quick demos started at once on one run directory: one takes the
// lease and finishes with every committed step intact; the other is refused
// with an error naming the holder and how to take over, and writes nothing.
// Local disk and a standalone fake GCS server (the lease there is held by
// generation preconditions).
func TestTwoWritersOnOneRunDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo and a fake GCS server")
	}
	startStandaloneGCS(t, "aipo-lease")
	for name, run := range map[string]string{"local": filepath.Join(t.TempDir(), "run"), "gcs": "gs://aipo-lease/runs/twice"} {
		t.Run(name, func(t *testing.T) {
			a, b := startChild(t, run), startChild(t, run)
			errA, errB := a.wait(t, 5*time.Minute), b.wait(t, 5*time.Minute)
			if (errA == nil) == (errB == nil) {
				t.Fatalf("want exactly one writer to run: first exited with %v, second with %v\nfirst's stderr:\n%s\nsecond's stderr:\n%s",
					errA, errB, a.stderr.String(), b.stderr.String())
			}
			refused := b
			if errA != nil {
				refused = a
			}
			msg := refused.stderr.String()
			for _, want := range []string{"is in use by", "aipo demo", "--take-over", run} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refused writer's error does not say %q:\n%s", want, msg)
				}
			}
			if n := len(refused.marks); n > 0 {
				t.Errorf("the refused writer started %d phases", n)
			}
			checkRunIntact(t, run)
			if ok, _ := storage.Exists(context.Background(), storage.Join(run, "_LEASE.json")); ok {
				t.Errorf("the finished writer left its lease behind")
			}
		})
	}
}

// tempFiles lists the temporary files and directories under a local run.
func tempFiles(t *testing.T, run string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(run, func(p string, d fs.DirEntry, err error) error {
		if err == nil && storage.IsTemp(d.Name()) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A run killed after its last commit but before metrics.jsonl was rebuilt
// (here: a finished run whose metrics.jsonl lost its last records, the
// state such a kill leaves) and the temporary files of dead attempts
// planted in every place a writer leaves them: started again, the run
// completes metrics.jsonl and removes every leftover.
func TestResumeAfterTheLastCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo twice")
	}
	run := filepath.Join(t.TempDir(), "run")
	c := startChild(t, run)
	if err := c.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("quick demo: %v\n%s", err, c.stderr.String())
	}
	mp := filepath.Join(run, "metrics.jsonl")
	want, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(want), "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("metrics.jsonl has %d records", len(lines))
	}
	if err := os.WriteFile(mp, []byte(strings.Join(lines[:len(lines)-2], "")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	owner := fmt.Sprintf("%d@%s", testtools.ExitedPID(t), storage.HostTag())
	planted := []string{
		"checkpoints/.step-000002.tmp-" + owner + "-1/model.safetensors",
		"step-000001/._MANIFEST.json.tmp-" + owner + "-2",
		"step-000001/shards/.tmp-" + owner + "-0123456789abcdef.parquet",
		".metrics.jsonl.tmp-" + owner + "-3",
		"metrics/.eval-000002.json.tmp-" + owner + "-4",
		"report/.report.md.tmp-" + owner + "-5",
	}
	for _, p := range planted {
		full := filepath.Join(run, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte("left by a killed writer"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c = startChild(t, run)
	if err := c.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("resumed quick demo: %v\n%s", err, c.stderr.String())
	}
	got, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("metrics.jsonl after the resume has %d lines, the finished run's %d", bytes.Count(got, []byte("\n")), len(lines))
	}
	if left := tempFiles(t, run); len(left) > 0 {
		t.Errorf("temporary files left after the resume: %v", left)
	}
	if _, err := os.Stat(filepath.Join(run, "_LEASE.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lease is still there after the run ended: %v", err)
	}
}

// A run killed after its last checkpoint committed and before that
// checkpoint's evaluation was written resumes by evaluating it, the last
// thing it does: metrics.jsonl and the report must still hold that
// evaluation, the report naming the last checkpoint as the final one.
func TestResumeWhoseLastActIsTheFinalEvaluation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo twice")
	}
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	last := cfg.Run.Steps
	run := filepath.Join(t.TempDir(), "run")
	c := startChild(t, run)
	if err := c.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("quick demo: %v\n%s", err, c.stderr.String())
	}
	mp := filepath.Join(run, "metrics.jsonl")
	finished, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	// The state the kill leaves: checkpoint `last` committed, its
	// evaluation record not yet written, metrics.jsonl rebuilt after the
	// learner's record of the last step.
	evalFile := filepath.Join(run, "metrics", fmt.Sprintf("eval-%06d.json", last))
	if err := os.Remove(evalFile); err != nil {
		t.Fatalf("the finished run has no evaluation of checkpoint %d: %v", last, err)
	}
	if err := RebuildMetrics(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report/report.md", "report/report.json"} {
		if err := os.Remove(filepath.Join(run, f)); err != nil {
			t.Fatal(err)
		}
	}
	c = startChild(t, run)
	if err := c.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("resumed quick demo: %v\n%s", err, c.stderr.String())
	}
	if _, err := os.Stat(evalFile); err != nil {
		t.Fatalf("the resume did not evaluate checkpoint %d: %v", last, err)
	}
	got, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	if n, want := bytes.Count(got, []byte("\n")), bytes.Count(finished, []byte("\n")); n != want {
		t.Errorf("metrics.jsonl after the resume has %d records, the finished run's %d", n, want)
	}
	checkMetricsRebuilt(t, run, "the resumed run")
	var rep struct {
		Evals []struct {
			Step int64 `json:"step"`
		} `json:"evals"`
	}
	b, err := os.ReadFile(filepath.Join(run, "report", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Evals) == 0 || rep.Evals[len(rep.Evals)-1].Step != last {
		t.Errorf("the report's evaluations end at %v, want checkpoint %d last", rep.Evals, last)
	}
}

// tree lists what lies under dir: every file with the sha256 of its bytes,
// every directory; nil when dir does not exist.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		out[rel] = fileSum(t, p)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The lease is taken by the command that owns the run (Claim) and only
// checked below it: Run, demo.Run, Learn, the rollout pipeline and the
// writers of run.yaml, algorithm.yaml and an --init checkpoint called
// without it fail with an error that names the run directory and the fix,
// and write nothing; under it they run. A second claim is refused, in the
// process that holds the lease and in another writer alike.
func TestLowerLayersRequireTheLease(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	cfg, run := h.cfg, h.cfg.Run.Dir
	cfg.Run.Steps, cfg.Eval.Every = 1, 0
	// notHeld checks the refusal of call, its message led by prefix.
	notHeld := func(call, prefix string, err error) {
		t.Helper()
		var nh *runlease.NotHeldError
		if !errors.As(err, &nh) {
			t.Fatalf("%s without the lease: %v, want a *runlease.NotHeldError", call, err)
		}
		for _, want := range []string{prefix + "run directory " + run, "lease (" + runlease.Name + ") is not held by this process", "train.Claim"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s without the lease: the error does not say %q: %v", call, want, err)
			}
		}
	}
	before := tree(t, run)
	notHeld("Run", "train: ", runWired(ctx, cfg, Options{}))
	_, err := rollout.Run(ctx, rollout.Options{Config: cfg, Step: 0})
	notHeld("rollout.Run", "rollout: ", err)
	_, err = runDemo(ctx, demoOptions{RunDir: run, Quick: true})
	notHeld("demo.Run", "demo: ", err)
	notHeld("runconfig.Remember", "", runconfig.Remember(ctx, cfg, false, nil))
	_, err = runconfig.WriteAlgorithm(ctx, cfg)
	notHeld("WriteAlgorithm", "", err)
	notHeld("SeedRunCheckpoint", "", SeedRunCheckpoint(ctx, rundir.Checkpoint(run, 0), cfg))
	unchanged := func(want map[string]string) {
		t.Helper()
		if got := tree(t, run); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("calls without the lease changed the run directory:\nbefore %v\nafter  %v", want, got)
		}
	}
	unchanged(before)
	if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), [][]schemas.Trajectory{{h.good, h.bad}}, schemas.Manifest{Run: cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	withStep := tree(t, run)
	_, err = Learn(ctx, cfg, 0)
	notHeld("Learn", "learn step 0: ", err)
	unchanged(withStep)

	lctx := claimed(t, ctx, run)
	if _, _, err := Claim(lctx, run, runlease.Options{}, nil); err == nil || !strings.Contains(err.Error(), "holds its lease already") {
		t.Errorf("a second claim by the holder: %v, want a refusal", err)
	}
	var held *runlease.HeldError
	if _, _, err := Claim(ctx, run, runlease.Options{Command: "aipo train"}, nil); !errors.As(err, &held) {
		t.Errorf("a second writer's claim: %v, want a *runlease.HeldError", err)
	}
	if _, err := Learn(lctx, cfg, 0); err != nil {
		t.Fatalf("learn step 0 under the lease: %v", err)
	}
	if ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(run, 1)); !ok {
		t.Fatalf("learn step 0 under the lease committed no checkpoint 1: %v", err)
	}

	// The whole loop, rollout included, from checkpoint 0 in a run of its own.
	h2 := newHandBuilt(t)
	cfg2 := h2.cfg
	cfg2.Run.Steps, cfg2.Eval.Every = 1, 0
	if err := runWired(claimed(t, ctx, cfg2.Run.Dir), cfg2, Options{}); err != nil {
		t.Fatalf("train under the lease: %v", err)
	}
	if _, err := schemas.ReadManifest(ctx, rundir.Step(cfg2.Run.Dir, 0)); err != nil {
		t.Errorf("train under the lease: step 0: %v", err)
	}
	if ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(cfg2.Run.Dir, 1)); !ok {
		t.Errorf("train under the lease committed no checkpoint 1: %v", err)
	}
}
