package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// childEnv makes the test binary run the quick demo in the named directory
// and exit, so that a test can kill it with SIGKILL at any moment.
const childEnv = "AIPO_TRAIN_TEST_CHILD_RUN"

// runChildIfAsked is called by TestMain before the tests: in a child it
// runs the quick demo and exits.
func runChildIfAsked() {
	dir := os.Getenv(childEnv)
	if dir == "" {
		return
	}
	flag.Parse()
	beam.Init()
	if _, err := RunDemo(context.Background(), DemoOptions{RunDir: dir, Quick: true}); err != nil {
		os.Stderr.WriteString("child: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(t *testing.T, dir string, killAfter time.Duration) (finished bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("quick demo in %s failed: %v", dir, err)
		}
		return true
	case <-time.After(killAfter):
		_ = cmd.Process.Kill() // SIGKILL: no chance to clean up
		<-done
		return false
	case <-time.After(5 * time.Minute):
		t.Fatal("quick demo ran past 5 minutes")
	}
	return false
}

func finalWeights(t *testing.T, dir string, steps int64) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(checkpoint.Dir(dir, steps), checkpoint.WeightsName))
	if err != nil {
		t.Fatalf("final checkpoint of %s: %v", dir, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Killed with SIGKILL at random moments and started again with the same
// command, the quick demo reaches a final checkpoint byte-identical to an
// uninterrupted run's, and every step holds exactly its trajectories.
func TestKilledRunsResumeToTheSameCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the quick demo many times")
	}
	cfg, err := DemoConfig(DemoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ref := filepath.Join(base, "reference")
	start := time.Now()
	runChild(t, ref, time.Hour)
	full := time.Since(start)
	want := finalWeights(t, ref, cfg.Run.Steps)
	rng := rand.New(rand.NewPCG(42, 0))
	const trials = 10
	kills := 0
	for trial := 0; trial < trials; trial++ {
		dir := filepath.Join(base, "trial", string(rune('a'+trial)))
		for attempt := 0; ; attempt++ {
			if attempt > 20 {
				t.Fatalf("trial %d: not finished after 20 restarts", trial)
			}
			// Kill somewhere in the first run's duration; later attempts get
			// longer so the trial ends.
			after := time.Duration(rng.Float64() * float64(full) * float64(attempt+1) / 2)
			if runChild(t, dir, after) {
				break
			}
			kills++
		}
		if got := finalWeights(t, dir, cfg.Run.Steps); got != want {
			t.Errorf("trial %d: final weights sha256 %s, uninterrupted run %s", trial, got, want)
		}
		for k := int64(0); k < cfg.Run.Steps; k++ {
			m, err := schemas.ReadManifest(context.Background(), schemas.StepDir(dir, k))
			if err != nil {
				t.Fatalf("trial %d step %d: %v", trial, k, err)
			}
			if want := int64(cfg.Data.BatchSize * cfg.Rollout.GroupSize); m.Rows != want {
				t.Errorf("trial %d step %d: %d trajectories, want %d", trial, k, m.Rows, want)
			}
		}
	}
	if kills < trials {
		t.Errorf("only %d kills in %d trials; the kill times missed the runs", kills, trials)
	}
	t.Logf("%d trials, %d kills, uninterrupted run %s", trials, kills, full.Round(time.Millisecond))
}
