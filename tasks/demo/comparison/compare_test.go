package comparison

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// The runs' rollout pipelines run on prism, in this process.
func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

// The quick comparison trains two methods with two seeds from one warm
// start: every run starts from the same weights, records its method and
// seed in run.yaml, and the report covers all four runs.
func TestQuickCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two methods with two seeds each")
	}
	ctx := context.Background()
	dir := t.TempDir()
	cmp, err := RunCompare(ctx, CompareOptions{Dir: dir, Quick: true, Methods: []string{"grpo", "aipo-mask"}, Seeds: 2, Log: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Runs) != 4 || len(cmp.Methods) != 2 {
		t.Fatalf("%d runs of %d methods, want 4 of 2", len(cmp.Runs), len(cmp.Methods))
	}
	warm, err := os.ReadFile(filepath.Join(rundir.Checkpoint(filepath.Join(dir, "warmstart"), 0), checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cmp.Runs {
		w, err := os.ReadFile(filepath.Join(rundir.Checkpoint(r.Dir, 0), checkpoint.WeightsName))
		if err != nil || string(w) != string(warm) {
			t.Errorf("%s: checkpoint 0 is not the shared warm start (%v)", r.Dir, err)
		}
		cfg, err := runconfig.Load(ctx, storage.Join(r.Dir, "run.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Run.Seed != r.Seed || cfg.Rollout.Unanswered != (r.Method == "grpo") {
			t.Errorf("%s: run.yaml has seed %d, unanswered %v; want seed %d, unanswered only for grpo", r.Dir, cfg.Run.Seed, cfg.Rollout.Unanswered, r.Seed)
		}
		if r.Method == "aipo-mask" && cfg.Learner.Loss.External != "mask" {
			t.Errorf("%s: external %q, want mask", r.Dir, cfg.Learner.Loss.External)
		}
		if _, ok := r.Final(); !ok || len(r.Steps) == 0 {
			t.Errorf("%s: no evaluation or no analytics", r.Dir)
		}
		if r.Method == "grpo" {
			for _, s := range r.Steps {
				if s.Interactions != 0 || s.ExternalTokenShare != 0 {
					t.Errorf("grpo step %d: %d interactions, external share %.2f; want none", s.Step, s.Interactions, s.ExternalTokenShare)
				}
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report", demorun.CompareMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| GRPO | 2 |", "| AIPO, Mask | 2 |", demorun.ComparePNG} {
		if !strings.Contains(string(md), want) {
			t.Errorf("compare.md lacks %q", want)
		}
	}
	if png, err := os.ReadFile(filepath.Join(dir, "report", demorun.ComparePNG)); err != nil || len(png) < 1000 {
		t.Errorf("comparison plot missing or empty (%d bytes, %v)", len(png), err)
	}
	if _, err := RunCompare(ctx, CompareOptions{Dir: dir, Quick: true, Methods: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "unknown method") {
		t.Errorf("an unknown method gave %v; want an error naming it", err)
	}
}
