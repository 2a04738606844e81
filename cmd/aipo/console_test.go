package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/train"
)

// runnerLine is a line of the runner's logs (prism and Beam's SDK log
// through slog's text handler).
var runnerLine = regexp.MustCompile(`(?m)^time=\S+ level=[A-Z]+ `)

// writeRun commits steps 0..n-1 of a run, two shards of two trajectories
// each, and returns the run directory.
func writeRun(t *testing.T, n int) string {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	for k := 0; k < n; k++ {
		var shards [][]schemas.Trajectory
		for sh := 0; sh < 2; sh++ {
			var rows []schemas.Trajectory
			for i := 0; i < 2; i++ {
				rows = append(rows, schemas.Trajectory{SchemaVersion: 1, Run: "r", Step: int64(k), PromptID: "p" + string(rune('0'+sh)),
					SampleIndex: int32(i), FinishReason: sampling.FinishEOS, ResponseIDs: []int32{5, 6},
					TokenSource: []int8{schemas.SourcePolicy, schemas.SourcePolicy}, BehaviorLogProbs: []float32{-1, -1},
					Correct: i == 0, Reward: float32(1 - i)})
			}
			shards = append(shards, rows)
		}
		if _, err := schemas.WriteStep(context.Background(), rundir.Step(run, int64(k)), shards, schemas.Manifest{Run: "r", Step: int64(k)}); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

// corrupt flips bytes in the middle of a step's first shard and returns
// its path.
func corrupt(t *testing.T, run string, k int64) string {
	t.Helper()
	m, err := schemas.ReadManifest(context.Background(), rundir.Step(run, k))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(rundir.Step(run, k), m.Files[0].Path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[len(b)/2:], "XXXX")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// One corrupt shard: aipo analyze reports the steps it could read, names
// the shard it could not, and prints no runner log line.
func TestAnalyzeNamesTheUnreadableShardAndReportsTheRest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aipo analyze in a child process")
	}
	run := writeRun(t, 3)
	bad := corrupt(t, run, 1)
	code, out := runAipo(t, "analyze", "--run", run)
	if code != 0 {
		t.Fatalf("aipo analyze exited %d; output (%d bytes):\n%s", code, len(out), out)
	}
	// Every line is aipo's own: the summary, the files written, the step
	// skipped (the runner's lines, with or without slog's prefix, are not).
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "analysed ") && !strings.HasPrefix(l, "  "+run) && !strings.HasPrefix(l, "analyze: skipping step ") {
			t.Errorf("line %q is not aipo's; output:\n%s", l, out)
		}
	}
	if !strings.Contains(out, bad) || !strings.Contains(out, "analysed 2 steps") || !strings.Contains(out, "skipping step 1") {
		t.Errorf("output does not say that 2 steps were analysed and step 1 skipped for %s:\n%s", bad, out)
	}
	if len(out) > 2048 {
		t.Errorf("output is %d bytes; want a few lines:\n%s", len(out), out)
	}
	b, err := os.ReadFile(filepath.Join(run, "analysis", analytics.JSONName))
	if err != nil {
		t.Fatal(err)
	}
	var rep analytics.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 2 || rep.Steps[0].Step != 0 || rep.Steps[1].Step != 2 || rep.Steps[0].Trajectories != 4 {
		t.Errorf("analysis.json steps %+v; want steps 0 and 2 of 4 trajectories", rep.Steps)
	}
	if len(rep.Unreadable) != 1 || rep.Unreadable[0].Shard != bad || !strings.Contains(rep.Unreadable[0].Reason, "sha256") {
		t.Errorf("analysis.json unreadable %+v; want %s with its sha256 mismatch", rep.Unreadable, bad)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Step != 1 {
		t.Errorf("analysis.json skipped %+v; want step 1", rep.Skipped)
	}

	// The runner's logs come back when asked for, by flag or environment.
	if _, out := runAipo(t, "analyze", "--run", run, "--log-level=info"); !runnerLine.MatchString(out) {
		t.Errorf("--log-level=info printed no runner log line:\n%s", out)
	}
	t.Setenv(logLevelEnv, "info")
	if _, out := runAipo(t, "analyze", "--run", run); !runnerLine.MatchString(out) {
		t.Errorf("%s=info printed no runner log line:\n%s", logLevelEnv, out)
	}
	t.Setenv(logLevelEnv, "loud")
	if code, out := runAipo(t, "analyze", "--run", run); code != 2 || !strings.Contains(out, logLevelEnv) {
		t.Errorf("%s=loud exited %d, want 2 naming it:\n%s", logLevelEnv, code, out)
	}
}

// A failed pipeline prints its first cause in one line; --verbose prints
// the runner's whole error.
func TestPipelineFailureInOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aipo analyze in a child process")
	}
	run := writeRun(t, 1)
	corrupt(t, run, 0)
	m, err := schemas.ReadManifest(context.Background(), rundir.Step(run, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Both shards of the only step: nothing can be analysed.
	p := filepath.Join(rundir.Step(run, 0), m.Files[1].Path)
	if err := os.WriteFile(p, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runAipo(t, "analyze", "--run", run)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(out, "no step of "+run+" could be read") || !strings.Contains(out, "--verbose") {
		t.Fatalf("aipo analyze exited %d with %d lines; want 1 and one line naming the cause:\n%s", code, len(lines), out)
	}
	code, out = runAipo(t, "analyze", "--run", run, "--verbose")
	if code != 1 || !strings.Contains(out, "caused by") || !strings.Contains(out, "no step of "+run+" could be read") {
		t.Fatalf("aipo analyze --verbose exited %d; want 1 with the runner's whole error:\n%s", code, out)
	}
}

// Commands on a gs:// run whose store cannot be reached (a closed port, a
// server that never answers) fail within the storage bound, naming the
// store's address and the cause, instead of waiting for minutes.
func TestUnreachableStorageFailsInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aipo commands in child processes")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg := filepath.Join("..", "..", "configs", "quick.yaml")
	for _, c := range []struct {
		name, addr, cause string
		args              []string
	}{
		{"analyze/closed", closed, "connection refused", []string{"analyze", "--run", "gs://b/run"}},
		{"analyze/silent", silent.Addr().String(), "no answer from", []string{"analyze", "--run", "gs://b/run"}},
		{"train/closed", closed, "connection refused", []string{"train", "--config", cfg, "--run", "gs://b/run"}},
		{"train/silent", silent.Addr().String(), "no answer from", []string{"train", "--config", cfg, "--run", "gs://b/run"}},
		{"serve/closed", closed, "connection refused", []string{"serve", "--checkpoint", "gs://b/run/checkpoints/step-000001", "--grpc", "", "--http", "127.0.0.1:0"}},
		{"serve/silent", silent.Addr().String(), "no answer from", []string{"serve", "--checkpoint", "gs://b/run/checkpoints/step-000001", "--grpc", "", "--http", "127.0.0.1:0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, out := runAipoEnv(t, []string{"STORAGE_EMULATOR_HOST=" + c.addr, "AIPO_STORAGE_TIMEOUT=2s"}, c.args...)
			took := time.Since(start)
			if code == 0 || !strings.Contains(out, c.addr) || !strings.Contains(out, c.cause) {
				t.Fatalf("exited %d after %s; want a failure naming %s and %q:\n%s", code, took, c.addr, c.cause, out)
			}
			// A command makes a few requests before it gives up, each
			// bounded by 2s; process start-up takes a second or two here.
			if took > 30*time.Second {
				t.Errorf("took %s with a 2s bound", took)
			}
		})
	}
}

// The plain progress lines print every number once (the reward only where
// it differs from the accuracy) and an ETA measured over this process's
// steps; on a terminal a log line never runs into the status line.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf}
	ev := func(step int64, elapsed time.Duration, acc, reward string) {
		p.event(train.Event{Step: step, Steps: 10, Phase: "learn", Elapsed: elapsed,
			Learn: &records.Learn{Loss: 0.5, GradNorm: 1, Tokens: 100, Seconds: 1,
				Rollout: records.RolloutMeta{"trajectories": "16", "accuracy": acc, "reward_mean": reward, "interactions_per_trajectory": "0.613281"}}})
	}
	// A run resumed at step 6: four steps left, each done in 10s.
	p.event(train.Event{Step: 6, Steps: 10, Phase: "rollout"})
	ev(6, 10*time.Second, "0.5625", "0.5625")
	ev(7, 20*time.Second, "0.75", "0.7")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "reward") || strings.Count(lines[0], "0.562") != 1 || !strings.Contains(lines[0], "interactions/traj 0.613 ") {
		t.Errorf("line %q: want the accuracy once, no reward equal to it, three decimals", lines[0])
	}
	if !strings.Contains(lines[1], "accuracy 0.750 reward 0.700") {
		t.Errorf("line %q: want the reward beside the accuracy it differs from", lines[1])
	}
	// The pace is that of the steps this process ran (10s each), not the
	// elapsed time spread over the run's steps.
	if !strings.Contains(lines[0], "ETA 30s") || !strings.Contains(lines[1], "ETA 20s") {
		t.Errorf("lines %q: want ETA 30s, then 20s (10s per step in this process)", lines)
	}

	var tty bytes.Buffer
	q := &progress{w: &tty, tty: true}
	console.setProgress(q)
	defer console.setProgress(nil)
	q.event(train.Event{Step: 3, Steps: 10, Phase: "rollout", Elapsed: time.Second})
	if _, err := console.Write([]byte("time=now level=INFO msg=runner\n")); err != nil {
		t.Fatal(err)
	}
	out := tty.String()
	i := strings.Index(out, "time=now")
	if i < 0 || out[i-1] != '\r' || strings.Contains(out, "ETA ?time") {
		t.Errorf("the log line does not start on a cleared line: %q", out)
	}
}

// aipoLine is a line of the demo's console that aipo writes (on a pipe:
// plain lines).
var aipoLine = regexp.MustCompile(`^(warm start|algorithm: |training|eval checkpoint|step \d+/\d+: |warning: step \d+ |analytics: |report: |policy alone|checkpoint +\d+: |quick demo: )`)

// The quick demo's console is aipo's own lines only, one per step, and
// says that --quick is a smoke test.
func TestQuickDemoConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo in a child process")
	}
	code, out := runAipo(t, "demo", "--quick", "--run", filepath.Join(t.TempDir(), "quick"))
	if code != 0 {
		t.Fatalf("aipo demo --quick exited %d:\n%s", code, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !aipoLine.MatchString(l) {
			t.Errorf("line %q is not aipo's", l)
		}
	}
	if !strings.Contains(out, "smoke test") || strings.Count(out, "step 3/3: ") != 1 {
		t.Errorf("the console does not say it is a smoke test, or does not print each step once:\n%s", out)
	}
}
