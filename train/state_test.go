package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// retainedAfter simulates a run of steps steps under p with no failure:
// after each commit, the checkpoints Retained keeps. It returns what the
// run directory holds at the end and the most it held at once.
func retainedAfter(p runconfig.Checkpoint, steps int64) (final []int64, most int) {
	var have []int64
	for k := int64(0); k <= steps; k++ {
		have = append(have, k)
		keep := p.Retained(have, func(s int64) bool { return p.FullAt(s, steps) }, func(int64) bool { return false })
		have = slices.DeleteFunc(have, func(s int64) bool { return !keep[s] })
		most = max(most, len(have))
	}
	return have, most
}

// Retention in the demo: after `make demo` (configs/demo.yaml, 200 steps)
// the run directory holds checkpoint 0, every 50th and the newest two, and
// never more than 6 at once; the quick demo ends with 0 and 3.
func TestDemoRetention(t *testing.T) {
	for _, tc := range []struct {
		quick bool
		want  []int64
		most  int
	}{{false, []int64{0, 50, 100, 150, 199, 200}, 6}, {true, []int64{0, 3}, 2}} {
		cfg, err := demoConfig(demoOptions{Quick: tc.quick})
		if err != nil {
			t.Fatal(err)
		}
		got, most := retainedAfter(cfg.Checkpoint, cfg.Run.Steps)
		if !slices.Equal(got, tc.want) || most != tc.most {
			t.Errorf("quick %v (%+v, %d steps): the run keeps %v, at most %d at once; want %v, at most %d", tc.quick, cfg.Checkpoint, cfg.Run.Steps, got, most, tc.want, tc.most)
		}
		// Every checkpoint kept at the end that the run reaches by a
		// multiple of save_every or as its last step is full.
		for _, k := range got {
			if full := cfg.Checkpoint.FullAt(k, cfg.Run.Steps); full != (k%cfg.Checkpoint.SaveEvery == 0 || k == cfg.Run.Steps) {
				t.Errorf("checkpoint %d: full %v", k, full)
			}
		}
	}
}

func TestRetainedKeepsWhatTheRunNeeds(t *testing.T) {
	none := func(int64) bool { return false }
	steps := []int64{0, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name string
		p    runconfig.Checkpoint
		full []int64
		open []int64
		want []int64
	}{
		{"keep_last 0 keeps all", runconfig.Checkpoint{KeepLast: 0}, nil, nil, steps},
		{"newest two, step 0", runconfig.Checkpoint{KeepLast: 2}, []int64{0, 8}, nil, []int64{0, 7, 8}},
		{"the newest full state", runconfig.Checkpoint{KeepLast: 2}, []int64{0, 4}, nil, []int64{0, 4, 7, 8}},
		{"only the newest full state", runconfig.Checkpoint{KeepLast: 1}, []int64{0, 3, 4}, nil, []int64{0, 4, 8}},
		{"keep_every", runconfig.Checkpoint{KeepLast: 1, KeepEvery: 3}, []int64{0, 8}, nil, []int64{0, 3, 6, 8}},
		{"a step being rolled out", runconfig.Checkpoint{KeepLast: 1}, []int64{0, 8}, []int64{5}, []int64{0, 5, 8}},
	} {
		in := func(s []int64) func(int64) bool { return func(k int64) bool { return slices.Contains(s, k) } }
		open := none
		if tc.open != nil {
			open = in(tc.open)
		}
		keep := tc.p.Retained(steps, in(tc.full), open)
		var got []int64
		for _, k := range steps {
			if keep[k] {
				got = append(got, k)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: kept %v, want %v", tc.name, got, tc.want)
		}
	}
}

// warmQuick makes the quick demo's warm start once per test and gives each
// run directory a copy as its checkpoint 0.
func warmQuick(t *testing.T) func(dir string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	task, err := demo.SourcesTask(cfg.Data.Sources)
	if err != nil {
		t.Fatal(err)
	}
	warm := rundir.Checkpoint(filepath.Join(t.TempDir(), "warm"), 0)
	if _, err := demo.WarmStart(ctx, warm, task, demo.QuickWarmStart(), nil); err != nil {
		t.Fatal(err)
	}
	return func(dir string) {
		if err := CopyWarmStart(ctx, warm, rundir.Checkpoint(dir, 0)); err != nil {
			t.Fatal(err)
		}
	}
}

// A run stopped after serving checkpoints resumes from the newest full
// state: it replays the learner steps since (checking each against the
// checkpoint it committed) and ends with the uninterrupted run's
// checkpoints, byte for byte. Replaying under another learner setting
// than the steps ran with is caught, naming the step.
func TestResumeReplaysFromTheNewestFullState(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo several times")
	}
	ctx := context.Background()
	seed := warmQuick(t)
	base := t.TempDir()
	mutate := func(c *runconfig.Config) {
		c.Run.Steps = 4
		c.Eval.Every = 0
		c.Checkpoint = runconfig.Checkpoint{SaveEvery: 3, KeepLast: 0}
	}
	ref := filepath.Join(base, "ref")
	seed(ref)
	if _, err := runDemo(claimed(t, ctx, ref), demoOptions{RunDir: ref, Quick: true, Mutate: mutate}); err != nil {
		t.Fatal(err)
	}
	want := checkpointSums(t, ref)
	for k, full := range map[int64]bool{0: true, 1: false, 2: false, 3: true, 4: true} {
		if got, err := checkpoint.Full(ctx, rundir.Checkpoint(ref, k)); got != full || err != nil {
			t.Errorf("checkpoint %d: full %v (%v), want %v", k, got, err, full)
		}
	}
	if _, err := os.Stat(filepath.Join(rundir.Checkpoint(ref, 1), checkpoint.OptimizerName)); err == nil {
		t.Errorf("serving checkpoint 1 holds %s", checkpoint.OptimizerName)
	}

	run := filepath.Join(base, "stopped")
	seed(run)
	lctx := claimed(t, ctx, run)
	if _, err := runDemo(lctx, demoOptions{RunDir: run, Quick: true, Mutate: mutate, StopAfter: 2}); err != nil {
		t.Fatal(err)
	}
	if _, k, _ := checkpoint.Latest(ctx, run); k != 2 {
		t.Fatalf("stopped after 2 steps at checkpoint %d", k)
	}
	// Another learning rate than the run's: the replay of step 0 gives
	// other weights than checkpoint 1 holds.
	cfg, err := demoConfig(demoOptions{RunDir: run, Quick: true, Mutate: mutate})
	if err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Learner.Optim.LR *= 2
	if _, err := Learn(lctx, other, 2); !errors.Is(err, checkpoint.ErrWeightsDiffer) || !strings.Contains(err.Error(), "replaying learner step 0") {
		t.Fatalf("learn step 2 with a changed learning rate: %v, want a replay mismatch at step 0", err)
	}
	var logs []string
	if _, err := runDemo(lctx, demoOptions{RunDir: run, Quick: true, Mutate: mutate, Log: func(s string) { logs = append(logs, s) }}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(logs, func(s string) bool {
		return strings.Contains(s, "replaying learner steps 0..1 from the full training state of checkpoint 0")
	}) {
		t.Errorf("the resumed run did not say it replayed steps 0..1: %q", logs)
	}
	if got := checkpointSums(t, run); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the resumed run's checkpoints differ from the uninterrupted run's:\n%v\nwant\n%v", got, want)
	}
}

// A learner setting changed with --reconfigure applies from the step it
// names; a run that resumes from a full state before the change replays
// the steps before it with the setting they ran with, and ends where a
// run that wrote every state ends.
func TestReplayUsesTheConfigurationEachStepRanWith(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo several times")
	}
	ctx := context.Background()
	seed := warmQuick(t)
	base := t.TempDir()
	var finals []string
	for _, saveEvery := range []int64{1, 4} {
		run := filepath.Join(base, fmt.Sprint("save-every-", saveEvery))
		seed(run)
		mutate := func(c *runconfig.Config) {
			c.Run.Steps = 4
			c.Eval.Every = 0
			c.Checkpoint = runconfig.Checkpoint{SaveEvery: saveEvery, KeepLast: 1}
		}
		lctx := claimed(t, ctx, run)
		if _, err := runDemo(lctx, demoOptions{RunDir: run, Quick: true, Mutate: mutate, StopAfter: 2}); err != nil {
			t.Fatal(err)
		}
		changed := func(c *runconfig.Config) {
			mutate(c)
			c.Learner.Optim.LR *= 3
		}
		if _, err := runDemo(lctx, demoOptions{RunDir: run, Quick: true, Mutate: changed, Reconfigure: true}); err != nil {
			t.Fatalf("save_every %d: %v", saveEvery, err)
		}
		if got, _ := checkpoint.List(ctx, run); !slices.Equal(got, []int64{0, 4}) {
			t.Errorf("save_every %d: checkpoints %v at the end, want [0 4]", saveEvery, got)
		}
		finals = append(finals, fileSum(t, filepath.Join(rundir.Checkpoint(run, 4), checkpoint.WeightsName)))
	}
	if finals[0] != finals[1] {
		t.Errorf("final weights: %s writing every state, %s replaying from checkpoint 0", finals[0], finals[1])
	}
}
