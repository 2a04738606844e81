package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records/tensorboard/tbtest"
	"github.com/aipo-rl/aipo/runconfig"
)

// runDigest is what a finished quick demo must hold, however often it was
// killed and resumed: the final weights, every step's trajectories, every
// checkpoint file, the evaluation records (their timing left out) and
// what the report says of them.
type runDigest struct {
	steps   int64
	weights string
	step    []string
	ckpts   map[string]string
	eval    string
	report  reportDigest
}

// reportDigest is the report's record of the run: which checkpoints were
// evaluated with which figures, and which steps learned.
type reportDigest struct {
	Evals []json.RawMessage
	Learn []int64
}

// digestRun digests a finished run written with cfg.
func digestRun(t *testing.T, dir string, cfg runconfig.Config) runDigest {
	t.Helper()
	d := runDigest{steps: cfg.Run.Steps,
		weights: fileSum(t, filepath.Join(rundir.Checkpoint(dir, cfg.Run.Steps), checkpoint.WeightsName)),
		ckpts:   checkpointSums(t, dir), eval: evalDigest(t, dir), report: readReportDigest(t, dir)}
	for k := range cfg.Run.Steps {
		sum, n := stepDigest(t, dir, k)
		if want := cfg.Data.BatchSize * cfg.Rollout.GroupSize; n != want {
			t.Fatalf("%s step %d holds %d trajectories, want %d", dir, k, n, want)
		}
		d.step = append(d.step, sum)
	}
	if len(d.report.Evals) == 0 || len(d.report.Learn) != int(cfg.Run.Steps) {
		t.Fatalf("%s: the report holds %d evaluations and %d learner steps, want some and %d", dir, len(d.report.Evals), len(d.report.Learn), cfg.Run.Steps)
	}
	return d
}

// readReportDigest reads report/report.json, each evaluation without its
// wall time.
func readReportDigest(t *testing.T, dir string) reportDigest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Evals []map[string]any `json:"evals"`
		Learn []struct {
			Step int64 `json:"step"`
		} `json:"learn"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: report.json: %v", dir, err)
	}
	var d reportDigest
	for _, e := range r.Evals {
		delete(e, "seconds")
		b, _ := json.Marshal(e)
		d.Evals = append(d.Evals, b)
	}
	for _, l := range r.Learn {
		d.Learn = append(d.Learn, l.Step)
	}
	return d
}

// check fails the test where the run at dir differs from the digest, or
// holds what no finished run may: a step beyond the last, temporary files
// of dead attempts, TensorBoard events twice or missing, a metrics.jsonl
// that is not the committed records, a missing analysis or report.
func (want runDigest) check(t *testing.T, dir, what string) {
	t.Helper()
	if got := fileSum(t, filepath.Join(rundir.Checkpoint(dir, want.steps), checkpoint.WeightsName)); got != want.weights {
		t.Errorf("%s: final weights sha256 %s, uninterrupted run %s", what, got, want.weights)
	}
	for k := range want.steps {
		if got, n := stepDigest(t, dir, k); got != want.step[k] {
			t.Errorf("%s step %d: %d trajectories differ from the uninterrupted run's", what, k, n)
		}
	}
	if extra, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("step-%06d", want.steps))); len(extra) > 0 {
		t.Errorf("%s: a step beyond the run's %d steps exists", what, want.steps)
	}
	// Every file of every checkpoint is the same, byte for byte (no
	// wall-clock time is written into one).
	got := checkpointSums(t, dir)
	for p, sum := range want.ckpts {
		if got[p] != sum {
			t.Errorf("%s: %s differs from the uninterrupted run's", what, p)
		}
	}
	if len(got) != len(want.ckpts) {
		t.Errorf("%s: %d checkpoint files, the uninterrupted run has %d", what, len(got), len(want.ckpts))
	}
	if left := tempFiles(t, dir); len(left) > 0 {
		t.Errorf("%s: temporary files of dead attempts left after the resume: %v", what, left)
	}
	if got := evalDigest(t, dir); got != want.eval {
		t.Errorf("%s: evaluation records differ from the uninterrupted run's", what)
	}
	// TensorBoard's event files (one per process that wrote) hold every
	// step of the records once: none lost to a kill, none repeated.
	tbtest.CheckEventsOnce(t, dir, what)
	checkMetricsRebuilt(t, dir, what)
	if _, err := os.Stat(filepath.Join(dir, "analysis", "analysis.json")); err != nil {
		t.Errorf("%s: analysis missing after the resumed run: %v", what, err)
	}
	if got := readReportDigest(t, dir); !reflect.DeepEqual(got, want.report) {
		t.Errorf("%s: the report records evaluations %s and learner steps %v; the uninterrupted run's %s and %v", what, got.Evals, got.Learn, want.report.Evals, want.report.Learn)
	}
}

// phaseMarks drops the changes from a child's marks, leaving its phases.
func phaseMarks(marks []mark) []mark {
	var out []mark
	for _, m := range marks {
		if m.phase != "change" {
			out = append(out, m)
		}
	}
	return out
}

// copyRun copies the run directory src to a new directory dst.
func copyRun(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// The last step of a run and what follows it (its checkpoint, the final
// evaluation, the analysis, the report, metrics.jsonl) are where a resume
// has the least left to redo, and where a kill once left metrics.jsonl
// without the final evaluation. So the quick demo, killed as its last
// step's rollout starts, is resumed and killed again right after each
// change it makes to the run directory in turn (storage's observer sees
// every file written, renamed or removed, the checkpoint writer's
// directory renames included), until a resume finishes with no change
// left to kill after. Every one of those runs, resumed once more, must end
// as the uninterrupted run did: same weights, trajectories, checkpoints,
// evaluations, report and metrics.jsonl.
func TestKilledAfterEveryChangeOfTheLastStep(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the quick demo once per change of its last step")
	}
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ref := filepath.Join(base, "reference")
	if finished, _ := runChild(t, ref, killPlan{}); !finished {
		t.Fatal("the uninterrupted quick demo did not finish")
	}
	want := digestRun(t, ref, cfg)

	snapshot := filepath.Join(base, "snapshot")
	last := fmt.Sprintf("rollout %d", cfg.Run.Steps-1)
	if finished, _ := runChildEnv(t, snapshot, killPlan{}, childKillAtPhaseEnv+"="+last); finished {
		t.Fatalf("the quick demo finished without starting phase %q", last)
	}
	var points []string
	for n := 1; ; n++ {
		if n > 500 {
			t.Fatalf("the resume from %q made more than 500 changes; the kill never came last", last)
		}
		dir := filepath.Join(base, fmt.Sprintf("change-%03d", n))
		copyRun(t, snapshot, dir)
		finished, marks := runChildEnv(t, dir, killPlan{}, fmt.Sprintf("%s=%d", childKillAtChangeEnv, n))
		if finished {
			want.check(t, dir, fmt.Sprintf("the resume from %q, not killed (%d changes)", last, n-1))
			break
		}
		var at mark
		for _, m := range marks {
			if m.phase == "change" {
				at = m
			}
		}
		if at.step != int64(n) {
			t.Fatalf("the child killed at change %d printed change %d (%s) last", n, at.step, at.path)
		}
		points = append(points, at.path)
		if finished, _ := runChild(t, dir, killPlan{}); !finished {
			t.Fatalf("the run killed after change %d (%s) did not finish when resumed", n, at.path)
		}
		want.check(t, dir, fmt.Sprintf("killed after change %d (%s)", n, at.path))
		if t.Failed() {
			t.FailNow() // the first point that breaks says the most
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(points) < 10 {
		t.Errorf("only %d changes after %q: the observer missed the run's writes (%v)", len(points), last, points)
	}
	t.Logf("killed after each of %d changes of the last step and what follows it: %v", len(points), points)
}
