package train

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/pipelines/eval"
	"github.com/aipo-rl/aipo/records/tensorboard/tbtest"
)

// startStandaloneGCS runs fake-gcs-server as its own process on 127.0.0.1,
// creates bucket, and points STORAGE_EMULATOR_HOST (inherited by child
// processes) at it.
func startStandaloneGCS(t *testing.T, bucket string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	host := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(testtools.Binary(t, "fake-gcs-server", "github.com/fsouza/fake-gcs-server"), "-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
		"-public-host", host, "-backend", "memory", "-log-level", "error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post("http://"+host+"/storage/v1/b?project=test", "application/json", strings.NewReader(fmt.Sprintf(`{"name": %q}`, bucket)))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("create bucket %s: HTTP %d", bucket, resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake-gcs-server did not answer on %s within 30s: %v", host, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", host)
}

// The quick demo with its run directory on gs:// (a standalone
// fake-gcs-server): killed in the middle and started again, it finishes
// with the same final checkpoint as a local run and TensorBoard's event
// files holding every step once; analytics and eval then read the run
// from gs://.
func TestGCSRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo twice and a fake GCS server")
	}
	ctx := context.Background()
	local := filepath.Join(t.TempDir(), "local")
	_, marks := runChild(t, local, killPlan{})
	cfg, err := demoConfig(demoOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	steps := cfg.Run.Steps
	want, err := os.ReadFile(filepath.Join(rundir.Checkpoint(local, steps), checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}

	startStandaloneGCS(t, "aipo-e2e")
	run := "gs://aipo-e2e/runs/quick"
	// Kill halfway through the learn phase of step 1 (as long as it took
	// in the local run), then resume with the same command.
	plan := killPlan{phase: "learn", step: 1}
	for i, m := range marks {
		if m.phase == "learn" && m.step == 1 && i+1 < len(marks) {
			plan.delay = (marks[i+1].at - m.at) / 2
		}
	}
	if finished, _ := runChild(t, run, plan); finished {
		t.Log("the run finished before the kill landed")
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(run, steps)); ok {
		t.Log("the final checkpoint was already committed after the kill")
	}
	if finished, _ := runChild(t, run, killPlan{}); !finished {
		t.Fatal("the resumed run did not finish")
	}
	got, err := storage.ReadFile(ctx, storage.Join(rundir.Checkpoint(run, steps), checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("final weights on gs:// (%d bytes) differ from the local run's (%d bytes)", len(got), len(want))
	}
	// TensorBoard's event files are on gs:// too, each step once across the
	// killed process's file and the resumed one's.
	tbtest.CheckEventsOnce(t, run, "gs:// run")

	// aipo analyze --run gs://...
	out := "gs://aipo-e2e/analysis-again"
	if _, err := analytics.Run(ctx, analytics.Options{Run: run, Out: out, Steps: analytics.AllSteps}); err != nil {
		t.Fatalf("analytics of the gs:// run: %v", err)
	}
	if ok, _ := storage.Exists(ctx, storage.Join(out, analytics.JSONName)); !ok {
		t.Fatalf("analytics wrote no %s under %s", analytics.JSONName, out)
	}

	// aipo eval of the gs:// run's final checkpoint, records on gs://.
	probs := filepath.Join(t.TempDir(), "sums.jsonl")
	if err := os.WriteFile(probs, []byte(`{"id": "a", "problem": "lugr+3?", "answer": "3"}
{"id": "b", "problem": "2+2?", "answer": "4"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ecfg, err := evalconfig.Parse([]byte(fmt.Sprintf(`
run: quick
out: gs://aipo-e2e/eval
policy: {uri: "inproc:%s?max_batch=8", label: quick-final}
sampling: {samples: 2, max_tokens: 8, seed: 1}
pass_k: [1, 2]
chunk_size: 1
benchmarks:
  - {name: sums, path: %s, verifier: integer, template: plain}
`, rundir.Checkpoint(run, steps), probs)), "gcs-eval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err := eval.Run(ctx, ecfg)
	if err != nil {
		t.Fatalf("eval from gs://: %v", err)
	}
	if !rep.Complete {
		t.Fatalf("eval report of the gs:// checkpoint is not complete")
	}
	chunks, err := storage.List(ctx, "gs://aipo-e2e/eval/records/sums/chunk-*/_MANIFEST.json")
	if err != nil || len(chunks) != 2 {
		t.Fatalf("eval chunks on gs://: %v (%v), want 2 committed", chunks, err)
	}
}
