package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/schemas"
)

// childArgs names the environment variable under which the test binary
// runs one aipo command instead of the tests (arguments separated by
// newlines): every command parses the process's global flag set, so each
// run needs a process of its own.
const childArgs = "AIPO_TEST_COMMAND_ARGS"

func TestMain(m *testing.M) {
	// Started by aipo itself (aipo train --nproc starts its ranks as
	// os.Executable() with the command's arguments): the binary is aipo.
	if len(os.Args) > 1 {
		if _, ok := commands[os.Args[1]]; ok {
			os.Exit(dispatch(os.Args[1:]))
		}
	}
	if args, ok := os.LookupEnv(childArgs); ok {
		os.Exit(dispatch(strings.Split(args, "\n")))
	}
	dir, err := os.MkdirTemp("", "aipo-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmd/aipo tests: a directory for the test process:", err)
		os.Exit(1)
	}
	testProcessDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testProcessDir holds what the test process makes once for all its
// tests (quickWarmStart); TestMain removes it.
var testProcessDir string

// runAipo runs one aipo command in a child process and returns its exit
// code and combined output.
func runAipo(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runAipoEnv(t, nil, args...)
}

// runAipoEnv is runAipo with extra environment variables (KEY=VALUE).
func runAipoEnv(t *testing.T, extra []string, args ...string) (int, string) {
	t.Helper()
	return runAipoFor(t, 3*time.Minute, extra, args...)
}

// runAipoFor is runAipoEnv with the time the command may take.
func runAipoFor(t *testing.T, limit time.Duration, extra []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd, out := aipoCommand(ctx, t, extra, args...)
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("aipo %s did not finish in time; output:\n%s", args[0], out.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("aipo %s: %v", args[0], err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// aipoCommand is the child process that runs one aipo command, its
// combined output going to the returned buffer (read it once the process
// has ended).
func aipoCommand(ctx context.Context, t testing.TB, extra []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0])
	// Nothing may leave the machine. The Dataflow runner checks the
	// staging bucket's soft-delete policy with a Cloud Storage client even
	// for a dry run, and only warns when that fails: pointing the
	// credentials at a missing file makes the client fail at once, before
	// any request (and before it looks for a metadata server).
	env := []string{childArgs + "=" + strings.Join(args, "\n"),
		"GOOGLE_APPLICATION_CREDENTIALS=" + filepath.Join(t.TempDir(), "none.json"), "HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case childArgs, "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "HOME", "CLOUDSDK_CONFIG":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// dataflowFlags are the flags of a Dataflow submission that only prints
// the job (--dry_run). The worker binary is not read for a dry run.
func dataflowFlags(t *testing.T) []string {
	worker := filepath.Join(t.TempDir(), "aipo-worker")
	if err := os.WriteFile(worker, []byte("not read by a dry run"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"--runner=dataflow", "--dry_run", "--project=aipo-test", "--region=europe-west4",
		"--staging_location=gs://aipo-test-bucket/staging", "--temp_location=gs://aipo-test-bucket/temp",
		"--worker_binary=" + worker, "--worker_machine_type=n2-standard-8", "--max_num_workers=4",
		"--job_name=aipo-dry-run"}
}

const dryRunMark = "Dry-run: not submitting job!"

// TestDataflowDryRunAnalyze translates the analytics pipeline into a
// Dataflow job offline: aipo analyze with --dry_run prints the job and
// succeeds.
func TestDataflowDryRunAnalyze(t *testing.T) {
	run := t.TempDir()
	rows := []schemas.Trajectory{{Run: "r", Step: 0, PromptID: "p0", SampleIndex: 0}}
	if _, err := schemas.WriteStep(context.Background(), rundir.Step(run, 0), [][]schemas.Trajectory{rows},
		schemas.Manifest{Run: "r", Step: 0}); err != nil {
		t.Fatal(err)
	}
	code, out := runAipo(t, append([]string{"analyze", "--run", run}, dataflowFlags(t)...)...)
	if code != 0 || !strings.Contains(out, dryRunMark) || !strings.Contains(out, dryRunNote) {
		t.Fatalf("aipo analyze --dry_run exited %d, want 0 with the job printed; output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(run, "analysis")); !os.IsNotExist(err) {
		t.Errorf("a dry run wrote the analysis (stat: %v)", err)
	}
	for _, want := range []string{"aipo-dry-run", "n2-standard-8", "gs://aipo-test-bucket/staging"} {
		if !strings.Contains(out, want) {
			t.Errorf("the printed job lacks %q; output:\n%s", want, out)
		}
	}
}

// TestDataflowDryRunRollout translates the rollout pipeline into a
// Dataflow job offline. The policy's token is referenced by file: the file
// name travels with the job, the token does not. A dry run writes nothing,
// the run's lease included, and with --force leaves the committed step as
// it was.
func TestDataflowDryRunRollout(t *testing.T) {
	dir := t.TempDir()
	const token = "tok-3c1f9a7e-never-in-the-job"
	tokenFile := filepath.Join(dir, "policy-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "run.yaml")
	run := filepath.Join(dir, "run")
	yaml := "run: {dir: " + run + "}\ndata: {demo: true, batch_size: 4}\nrollout: {group_size: 2}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := "grpcs://policy.example:7070?token_file=" + tokenFile
	code, out := runAipo(t, append([]string{"rollout", "--config", cfg, "--step", "0", "--policy", policy}, dataflowFlags(t)...)...)
	if code != 0 || !strings.Contains(out, dryRunMark) || !strings.Contains(out, dryRunNote) {
		t.Fatalf("aipo rollout --dry_run exited %d, want 0 with the job printed; output:\n%s", code, out)
	}
	if !strings.Contains(out, tokenFile) {
		t.Errorf("the printed job does not name the token file %s", tokenFile)
	}
	if strings.Contains(out, token) {
		t.Errorf("the printed job holds the policy token")
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("a dry run created %s (stat: %v)", run, err)
	}

	ctx := context.Background()
	rows := []schemas.Trajectory{{Run: "r", Step: 0, PromptID: "p0", SampleIndex: 0}}
	if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), [][]schemas.Trajectory{rows}, schemas.Manifest{Run: "r", Step: 0}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(rundir.Step(run, 0), rundir.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	code, out = runAipo(t, append([]string{"rollout", "--config", cfg, "--step", "0", "--policy", policy, "--force"}, dataflowFlags(t)...)...)
	if code != 0 || !strings.Contains(out, dryRunNote) {
		t.Fatalf("aipo rollout --force --dry_run exited %d, want 0 with the job printed; output:\n%s", code, out)
	}
	after, err := os.ReadFile(filepath.Join(rundir.Step(run, 0), rundir.ManifestName))
	if err != nil || !bytes.Equal(after, before) {
		t.Errorf("a dry run with --force changed the committed step's manifest (%v)", err)
	}
}

// TestDataflowDryRunEval translates the eval pipeline into a Dataflow job
// offline. Benchmark files are read by the launcher; the report of the
// chunks committed before (none here) is still written to out.
func TestDataflowDryRunEval(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "tiny.jsonl")
	if err := os.WriteFile(bench, []byte(`{"problem":"1+1?","answer":"2","id":"a"}`+"\n"+`{"problem":"2+2?","answer":"4","id":"b"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "eval.yaml")
	yaml := "run: tiny\nout: " + out + "\npolicy: {uri: \"grpc://policy.example:7070\", label: p}\n" +
		"sampling: {samples: 2, max_tokens: 16}\npass_k: [1]\nchunk_size: 1\n" +
		"benchmarks:\n  - {name: tiny, path: " + bench + ", verifier: math, template: math}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	code, text := runAipo(t, append([]string{"eval", "--config", cfg}, dataflowFlags(t)...)...)
	if code != 0 || !strings.Contains(text, dryRunMark) || !strings.Contains(text, dryRunNote) {
		t.Fatalf("aipo eval --dry_run exited %d, want 0 with the job printed; output:\n%s", code, text)
	}
	if _, err := os.Stat(filepath.Join(out, "records")); !os.IsNotExist(err) {
		t.Errorf("a dry run committed records under %s (stat: %v)", out, err)
	}
}
