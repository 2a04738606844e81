package train

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// childEnv makes the test binary run the quick demo in the named directory
// and exit, so that a test can kill it with SIGKILL at any moment. The
// child prints a line "PHASE <name> <step>" on stdout when a phase starts.
const childEnv = "AIPO_TRAIN_TEST_CHILD_RUN"

// childAsyncEnv, set to 1 beside childEnv, makes the child's run
// asynchronous (run.async).
const childAsyncEnv = "AIPO_TRAIN_TEST_CHILD_ASYNC"

// childPartialEnv, set to a number N beside childEnv, makes the child's
// run asynchronous with deterministic partial rollouts
// (rollout.partial_tokens N).
const childPartialEnv = "AIPO_TRAIN_TEST_CHILD_PARTIAL"

// childCarryEnv, set to 1 beside childEnv, makes the child's run the
// quick demo under rollout.carry of TestQuickDemoCarry (carryDemo on
// carryWarmStart).
const childCarryEnv = "AIPO_TRAIN_TEST_CHILD_CARRY"

// childKillAtPhaseEnv ("PHASE STEP", as the child prints them: an Event's
// phase, or "learned" once a learner step has committed its checkpoint)
// makes the child kill itself with SIGKILL as that phase of that step
// starts. The value killCarrying kills it instead as the first learner
// step ends while a committed step's carried groups are being continued
// by a rollout not yet committed (printing "PHASE carrying K", K the step
// that carried them).
const childKillAtPhaseEnv = "AIPO_TRAIN_TEST_CHILD_KILL_AT_PHASE"

// killCarrying is childKillAtPhaseEnv's value for a kill while carried
// groups are in flight.
const killCarrying = "carrying"

// childKillAtChangeEnv (a number N) makes the child kill itself with
// SIGKILL right after the N-th change it makes to files (storage's
// observer sees every one), so that nothing after that change happens.
// Every child prints a line "CHANGE <n> <path relative to the run>" for
// each change it makes.
const childKillAtChangeEnv = "AIPO_TRAIN_TEST_CHILD_KILL_AT_CHANGE"

// killSelf ends the process the way a crash or an OOM kill does: no
// deferred function runs, nothing is flushed or cleaned up.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// observeChanges prints every change the child makes under dir, and
// kills the child right after change number killAt when that is a number.
func observeChanges(dir, killAt string) {
	var mu sync.Mutex
	var n int64 // changes seen, under mu
	at, _ := strconv.ParseInt(killAt, 10, 64)
	storage.ObserveChanges(func(p string) {
		rel, err := filepath.Rel(dir, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return // not the run's (a warm start's scratch files)
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		fmt.Fprintf(os.Stdout, "CHANGE %d %s\n", n, rel)
		if n == at {
			killSelf()
		}
	})
}

// runChildIfAsked is called by TestMain before the tests: in a child it
// runs the quick demo and exits.
func runChildIfAsked() {
	dir := os.Getenv(childEnv)
	if dir == "" {
		return
	}
	flag.Parse()
	beam.Init()
	phase := func(name string, step int64) { fmt.Fprintf(os.Stdout, "PHASE %s %d\n", name, step) }
	o := demoOptions{RunDir: dir, Quick: true,
		Progress: func(e Event) {
			switch {
			case e.Phase == "learn" && e.Learn != nil:
				phase("learned", e.Step)
			case e.Phase == "eval" && e.Eval != nil:
			default:
				phase(e.Phase, e.Step)
			}
		},
		Log: func(s string) {
			switch {
			case strings.HasPrefix(s, "warm start:"):
				phase("warmstart", 0)
			case strings.HasPrefix(s, "analytics:"):
				phase("analytics", 0)
			case strings.HasPrefix(s, "report:"):
				phase("report", 0)
			}
		},
	}
	if os.Getenv(childAsyncEnv) == "1" {
		o.Mutate = func(c *runconfig.Config) { c.Run.Async = true }
	}
	if os.Getenv(childCarryEnv) == "1" {
		o.Mutate, o.WarmStart = carryDemo, carryWarmStart()
	}
	if n := os.Getenv(childPartialEnv); n != "" {
		tokens, err := strconv.Atoi(n)
		if err != nil {
			os.Stderr.WriteString("child: " + childPartialEnv + ": " + err.Error() + "\n")
			os.Exit(1)
		}
		o.Mutate = partialSplit(tokens)
	}
	killAtPhase := os.Getenv(childKillAtPhaseEnv)
	if killAtPhase != "" {
		progress := o.Progress
		o.Progress = func(e Event) {
			name := e.Phase
			if e.Phase == "learn" && e.Learn != nil {
				name = "learned"
			}
			if fmt.Sprintf("%s %d", name, e.Step) == killAtPhase {
				killSelf()
			}
			if killAtPhase == killCarrying && name == "learned" {
				if k, ok := carriedInFlight(context.Background(), dir); ok {
					phase(killCarrying, k)
					killSelf()
				}
			}
			progress(e)
		}
	}
	observeChanges(dir, os.Getenv(childKillAtChangeEnv))
	// The child is the command that owns the run, as aipo demo is.
	ctx, release, err := Claim(context.Background(), dir, runlease.Options{Command: "aipo demo"}, o.Log)
	if err != nil {
		os.Stderr.WriteString("child: " + err.Error() + "\n")
		os.Exit(1)
	}
	_, err = runDemo(ctx, o)
	release() // os.Exit runs no deferred function
	if err != nil {
		os.Stderr.WriteString("child: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// mark is a phase start seen in a child's output, or a change it made
// (phase "change", step the change's number).
type mark struct {
	phase string
	step  int64
	path  string        // a change's path, relative to the run
	at    time.Duration // since the child started
}

// killedBySIGKILL reports whether a child's Wait error says SIGKILL ended it.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// killPlan kills the child once the mark (phase, step) has been seen and
// then delay has passed; a zero plan lets the child finish. A child that
// runs past limit (5 minutes when zero) fails the test.
type killPlan struct {
	phase string
	step  int64
	delay time.Duration
	limit time.Duration
}

// runChild runs the quick demo in dir, killing it (SIGKILL: no chance to
// clean up) as the plan says. It returns whether the child finished and
// the phase marks it printed.
func runChild(t *testing.T, dir string, plan killPlan) (finished bool, marks []mark) {
	t.Helper()
	return runChildEnv(t, dir, plan)
}

// runChildEnv is runChild with more environment variables for the child.
func runChildEnv(t *testing.T, dir string, plan killPlan, env ...string) (finished bool, marks []mark) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), env...)
	selfKill := false
	for _, e := range env {
		selfKill = selfKill || strings.HasPrefix(e, childKillAtPhaseEnv+"=") || strings.HasPrefix(e, childKillAtChangeEnv+"=")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan mark, 64)
	go func() {
		defer close(seen)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m mark
			if rel, ok := strings.CutPrefix(sc.Text(), "CHANGE "); ok {
				m.phase = "change"
				if n, p, ok := strings.Cut(rel, " "); ok {
					m.step, _ = strconv.ParseInt(n, 10, 64)
					m.path = p
				}
				m.at = time.Since(start)
				seen <- m
			} else if _, err := fmt.Sscanf(sc.Text(), "PHASE %s %d", &m.phase, &m.step); err == nil {
				m.at = time.Since(start)
				seen <- m
			}
		}
	}()
	var kill <-chan time.Time
	limit := cmp.Or(plan.limit, 5*time.Minute)
	timeout := time.After(limit)
	for {
		select {
		case m, ok := <-seen:
			if !ok {
				// The child ended on its own (before any planned kill, or
				// without the planned phase: it was already done).
				err := cmd.Wait()
				if selfKill && killedBySIGKILL(err) {
					return false, marks
				}
				if err != nil {
					e := stderr.Bytes()
					t.Fatalf("quick demo in %s failed: %v; the end of its stderr:\n%s", dir, err, e[max(0, len(e)-4096):])
				}
				return true, marks
			}
			marks = append(marks, m)
			if kill == nil && plan.phase != "" && m.phase == plan.phase && m.step == plan.step {
				kill = time.After(plan.delay)
			}
		case <-kill:
			_ = cmd.Process.Kill()
			for range seen {
			}
			err := cmd.Wait()
			if err == nil {
				return true, marks // it finished before the kill landed
			}
			return false, marks
		case <-timeout:
			// SIGQUIT makes the Go child print every goroutine's stack
			// before it exits: where it waits is the first thing to know.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-waitSeen(seen):
			case <-time.After(15 * time.Second):
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			e := stderr.Bytes()
			t.Fatalf("quick demo in %s ran past %v; phase marks seen: %v; the end of its stderr (goroutines at SIGQUIT):\n%s", dir, limit, marks, e[max(0, len(e)-64<<10):])
		}
	}
}

// waitSeen is closed once seen is drained and closed (the child's stdout
// ended).
func waitSeen(seen <-chan mark) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range seen {
		}
		close(done)
	}()
	return done
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// stepDigest reads a committed step (refusing it without its manifest) and
// returns a digest of its trajectories in (prompt, sample) order, latency
// left out. It fails on a duplicated (prompt, sample).
func stepDigest(t *testing.T, dir string, k int64) (string, int) {
	t.Helper()
	rows, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), rundir.Step(dir, k))
	if err != nil {
		t.Fatalf("%s step %d: %v", dir, k, err)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].PromptID != rows[j].PromptID {
			return rows[i].PromptID < rows[j].PromptID
		}
		return rows[i].SampleIndex < rows[j].SampleIndex
	})
	h := sha256.New()
	for i, r := range rows {
		if i > 0 && r.PromptID == rows[i-1].PromptID && r.SampleIndex == rows[i-1].SampleIndex {
			t.Errorf("%s step %d: trajectory %s/%d appears twice", dir, k, r.PromptID, r.SampleIndex)
		}
		r.InteractionLatencyMs = nil
		b, _ := json.Marshal(r)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), len(rows)
}

// checkpointSums maps every file under the run's checkpoints/ (relative
// path) to its sha256.
func checkpointSums(t *testing.T, run string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(run, "checkpoints")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fileSum(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// evalDigest is the run's evaluation records, their timing left out.
func evalDigest(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "metrics", "eval-*.json"))
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		delete(m, "seconds")
		b, _ = json.Marshal(m)
		fmt.Fprintf(h, "%s %s\n", filepath.Base(f), b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// The crash suite: the quick demo is killed with SIGKILL at random moments
// of the warm start, rollout, learn, checkpoint commit, evaluation and
// analytics, then started again with the same command until it finishes.
// Every trial must end with the uninterrupted run's final checkpoint (same
// sha256), the same trajectories in every step (none lost, none
// duplicated, every step read through its manifest), the same
// evaluation records, and TensorBoard's event files holding every step's
// metrics once.
func TestKilledRunsResumeToTheSameCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the quick demo many times")
	}
	crashSuite(t, false, 24)
}

// The same for the asynchronous loop (run.async), where step k's rollout
// runs on checkpoint k-1 while the learner commits checkpoint k, and two
// rollouts may be in flight: killed anywhere, a run resumes to the
// uninterrupted asynchronous run's checkpoints, trajectories and
// evaluations, every step sampled by the checkpoint before it.
func TestKilledAsyncRunsResumeToTheSameCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the quick demo many times")
	}
	crashSuite(t, true, 9)
}

// crashSuite runs the quick demo (asynchronous or not) uninterrupted, then
// trials times killed and resumed, and compares.
func crashSuite(t *testing.T, async bool, trials int) {
	var env []string
	if async {
		env = append(env, childAsyncEnv+"=1")
	}
	run := func(dir string, plan killPlan) (bool, []mark) { return runChildEnv(t, dir, plan, env...) }
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ref := filepath.Join(base, "reference")
	_, marks := run(ref, killPlan{})
	marks = phaseMarks(marks)
	steps := cfg.Run.Steps
	want := digestRun(t, ref, cfg)

	// How long each phase lasted in the reference run, to aim the kills.
	type span struct {
		m   mark
		dur time.Duration
	}
	var spans []span
	for i, m := range marks {
		if i+1 < len(marks) {
			spans = append(spans, span{m, marks[i+1].at - m.at})
		}
	}
	byPhase := map[string][]span{}
	for _, s := range spans {
		byPhase[s.m.phase] = append(byPhase[s.m.phase], s)
	}
	// "checkpoint": the end of a learn phase, where checkpoint k+1 is
	// written and committed.
	targets := []string{"warmstart", "rollout", "learn", "checkpoint", "eval", "analytics"}
	for _, p := range targets {
		if p != "checkpoint" && len(byPhase[p]) == 0 {
			t.Fatalf("the reference run printed no %q phase; marks: %v", p, marks)
		}
	}
	if async {
		// Step k was sampled by checkpoint k-1 (step 0 by checkpoint 0),
		// as the versions the engine named say.
		for k := range steps {
			rows, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), rundir.Step(ref, k))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if want := max(0, k-1); r.PolicyVersion != want {
					t.Fatalf("asynchronous step %d: trajectory %s/%d sampled by version %d, want %d", k, r.PromptID, r.SampleIndex, r.PolicyVersion, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(42, 0))
	kills, perPhase := 0, map[string]int{}
	for trial := range trials {
		target := targets[trial%len(targets)]
		var s span
		frac := rng.Float64()
		if target == "checkpoint" {
			s = byPhase["learn"][rng.IntN(len(byPhase["learn"]))]
			frac = 0.6 + 0.4*frac
		} else {
			s = byPhase[target][rng.IntN(len(byPhase[target]))]
		}
		plan := killPlan{phase: s.m.phase, step: s.m.step, delay: time.Duration(frac * float64(s.dur))}
		dir := filepath.Join(base, fmt.Sprintf("trial-%02d", trial))
		// Every third trial is killed a second time, in the next attempt,
		// at a random moment of its whole run.
		plans := []killPlan{plan}
		if trial%3 == 2 {
			all := marks[rng.IntN(len(marks))]
			plans = append(plans, killPlan{phase: all.phase, step: all.step, delay: time.Duration(rng.Float64() * float64(50*time.Millisecond))})
		}
		for attempt := 0; ; attempt++ {
			if attempt > 10 {
				t.Fatalf("trial %d: not finished after 10 restarts", trial)
			}
			p := killPlan{}
			if attempt < len(plans) {
				p = plans[attempt]
			}
			finished, _ := run(dir, p)
			if finished {
				break
			}
			kills++
			if attempt == 0 {
				perPhase[target]++
			}
		}
		want.check(t, dir, fmt.Sprintf("trial %d (killed in %s)", trial, target))
	}
	if kills < trials {
		t.Errorf("only %d kills in %d trials; the kill times missed the runs", kills, trials)
	}
	t.Logf("%d trials, %d kills (first kill by phase: %v); uninterrupted run %s", trials, kills, perPhase, marks[len(marks)-1].at.Round(time.Millisecond))
}

// checkMetricsRebuilt fails the test unless the run's metrics.jsonl holds
// exactly the committed records of metrics/, as rebuilding it from them
// gives: none missing (an evaluation a resume ran last) and none extra.
func checkMetricsRebuilt(t *testing.T, dir, what string) {
	t.Helper()
	p := filepath.Join(dir, "metrics.jsonl")
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := RebuildMetrics(context.Background(), dir); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: metrics.jsonl holds %d records, the committed records of metrics/ %d", what, bytes.Count(got, []byte("\n")), bytes.Count(want, []byte("\n")))
	}
}
