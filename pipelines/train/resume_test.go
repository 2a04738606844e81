package train

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/runconfig"
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
	o := DemoOptions{RunDir: dir, Quick: true,
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
	if _, err := RunDemo(context.Background(), o); err != nil {
		os.Stderr.WriteString("child: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// mark is a phase start seen in a child's output.
type mark struct {
	phase string
	step  int64
	at    time.Duration // since the child started
}

// killPlan kills the child once the mark (phase, step) has been seen and
// then delay has passed; a zero plan lets the child finish.
type killPlan struct {
	phase string
	step  int64
	delay time.Duration
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
			if _, err := fmt.Sscanf(sc.Text(), "PHASE %s %d", &m.phase, &m.step); err == nil {
				m.at = time.Since(start)
				seen <- m
			}
		}
	}()
	var kill <-chan time.Time
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case m, ok := <-seen:
			if !ok {
				// The child ended on its own (before any planned kill, or
				// without the planned phase: it was already done).
				if err := cmd.Wait(); err != nil {
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
			_ = cmd.Process.Kill()
			t.Fatal("quick demo ran past 5 minutes")
		}
	}
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
	rows, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), schemas.StepDir(dir, k))
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
	cfg, err := DemoConfig(DemoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ref := filepath.Join(base, "reference")
	_, marks := run(ref, killPlan{})
	steps := cfg.Run.Steps
	wantWeights := fileSum(t, filepath.Join(checkpoint.Dir(ref, steps), checkpoint.WeightsName))
	wantSteps := make([]string, steps)
	for k := range steps {
		var n int
		wantSteps[k], n = stepDigest(t, ref, k)
		if want := cfg.Data.BatchSize * cfg.Rollout.GroupSize; n != want {
			t.Fatalf("reference step %d holds %d trajectories, want %d", k, n, want)
		}
	}
	wantEval := evalDigest(t, ref)
	wantCkpts := checkpointSums(t, ref)

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
			rows, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), schemas.StepDir(ref, k))
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
		if got := fileSum(t, filepath.Join(checkpoint.Dir(dir, steps), checkpoint.WeightsName)); got != wantWeights {
			t.Errorf("trial %d (killed in %s): final weights sha256 %s, uninterrupted run %s", trial, target, got, wantWeights)
		}
		for k := range steps {
			got, n := stepDigest(t, dir, k)
			if got != wantSteps[k] {
				t.Errorf("trial %d (killed in %s) step %d: %d trajectories differ from the uninterrupted run's", trial, target, k, n)
			}
		}
		if extra, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("step-%06d", steps))); len(extra) > 0 {
			t.Errorf("trial %d: a step beyond the run's %d steps exists", trial, steps)
		}
		// Every file of every checkpoint is the same, byte for byte (no
		// wall-clock time is written into one).
		if got := checkpointSums(t, dir); fmt.Sprint(got) != fmt.Sprint(wantCkpts) {
			for p, sum := range wantCkpts {
				if got[p] != sum {
					t.Errorf("trial %d (killed in %s): %s differs from the uninterrupted run's", trial, target, p)
				}
			}
			if len(got) != len(wantCkpts) {
				t.Errorf("trial %d (killed in %s): %d checkpoint files, the uninterrupted run has %d", trial, target, len(got), len(wantCkpts))
			}
		}
		if left := tempFiles(t, dir); len(left) > 0 {
			t.Errorf("trial %d (killed in %s): temporary files of dead attempts left after the resume: %v", trial, target, left)
		}
		if got := evalDigest(t, dir); got != wantEval {
			t.Errorf("trial %d (killed in %s): evaluation records differ from the uninterrupted run's", trial, target)
		}
		// TensorBoard's event files (one per process that wrote) hold every
		// step of the records once: none lost to a kill, none repeated.
		checkEventsOnce(t, dir, fmt.Sprintf("trial %d (killed in %s)", trial, target))
		checkMetricsRebuilt(t, dir, fmt.Sprintf("trial %d (killed in %s)", trial, target))
		for _, f := range []string{"report/report.md", "analysis/analysis.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("trial %d: %s missing after the resumed run: %v", trial, f, err)
			}
		}
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
