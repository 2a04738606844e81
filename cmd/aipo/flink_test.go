//go:build flink

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/serve"
)

// beamEngine is a Beam job server the tests submit to: a Flink cluster's or
// Spark's, started by the project's scripts on 127.0.0.1.
type beamEngine struct {
	name     string // the --runner value
	endpoint string // the job server's job API
	state    string // the scripts' state directory (PIDs, logs)
	rest     string // Flink's REST address; empty for Spark
	restart  func() // starts the parts that are down again
}

// beamFlags are the flags that send an aipo pipeline to e, its workers
// started by the TaskManagers (or Spark's executors) through the Go SDK's
// boot program in a PROCESS environment.
func (e beamEngine) beamFlags(root string) []string {
	return []string{"--runner=" + e.name, "--endpoint=" + e.endpoint, "--environment_type=PROCESS",
		`--environment_config={"command":"` + filepath.Join(root, "scripts", "flink", "worker-boot.sh") + `"}`,
		"--worker_binary=" + filepath.Join(root, "bin", "aipo-worker")}
}

// logs returns the tail of every log the scripts kept in e.state.
func (e beamEngine) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(e.state, "log", "*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// The failures the workers' boot programs reported (they log
		// through the TaskManager or the job server), then the tail.
		var errs []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "Failed to") || strings.Contains(line, "boot.go") || strings.Contains(line, "Caused by") {
				errs = append(errs, line)
			}
		}
		if len(errs) > 40 {
			errs = errs[len(errs)-40:]
		}
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(&b, "----- %s: failures reported\n%s\n----- %s (tail)\n%s\n", f, strings.Join(errs, "\n"), f, data)
	}
	return b.String()
}

// repoRoot is the clone's root, with the worker binaries the PROCESS
// environment needs (make test builds them: make worker beam-boot).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bin/aipo-worker", "bin/beam-boot"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("%s is missing: `make worker beam-boot` builds it (make test does)", p)
		}
	}
	return root
}

// runScript runs one of the project's scripts with env added, for at most
// limit, and fails the test with its output when it fails.
func runScript(t *testing.T, limit time.Duration, env []string, path string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v (limit %s); output:\n%s", path, strings.Join(args, " "), err, limit, out.String())
	}
	return out.String()
}

// startFlink starts a Flink cluster (one JobManager, two TaskManagers) and
// Beam's Flink job server with scripts/flink/cluster.sh, stopped when the
// test ends; the cluster's logs are printed if the test fails.
func startFlink(t *testing.T, root string) beamEngine {
	t.Helper()
	e := beamEngine{name: "flink", endpoint: freeAddr(t), state: t.TempDir(), rest: freeAddr(t)}
	// The first start downloads Flink (230 MB) and the job server's jars
	// (150 MB); later ones find them in the cache.
	e.start(t, filepath.Join(root, "scripts", "flink", "cluster.sh"), "FLINK_STATE",
		"REST_PORT="+portOf(e.rest), "RPC_PORT="+portOf(freeAddr(t)), "BLOB_PORT="+portOf(freeAddr(t)))
	return e
}

// startSpark starts Beam's Spark job server with a local Spark master
// (scripts/spark/job-server.sh), stopped when the test ends.
func startSpark(t *testing.T, root string) beamEngine {
	t.Helper()
	e := beamEngine{name: "spark", endpoint: freeAddr(t), state: t.TempDir()}
	e.start(t, filepath.Join(root, "scripts", "spark", "job-server.sh"), "SPARK_STATE")
	return e
}

// start runs `script start` with e's state directory in the variable
// stateVar, its job port and free artifact and expansion ports (and env
// besides), stops it with `script stop` when the test ends, printing its
// logs first if the test failed, and sets e.restart.
func (e *beamEngine) start(t *testing.T, script, stateVar string, env ...string) {
	t.Helper()
	env = append(env, stateVar+"="+e.state, "JOB_PORT="+portOf(e.endpoint),
		"ARTIFACT_PORT="+portOf(freeAddr(t)), "EXPANSION_PORT="+portOf(freeAddr(t)))
	t.Logf("%s", runScript(t, 15*time.Minute, env, script, "start"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the %s processes' logs:\n%s", e.name, e.logs())
		}
		runScript(t, time.Minute, env, script, "stop")
		if left := processesIn(e.state); len(left) > 0 {
			t.Errorf("%s stop left processes working in %s: %v", script, e.state, left)
		}
	})
	e.restart = func() { t.Logf("%s", runScript(t, 5*time.Minute, env, script, "start")) }
}

// processesIn lists the processes whose working directory is dir or below
// it (the workers a TaskManager started inherit its directory), each as
// "PID command".
func processesIn(dir string) []string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		cwd, err := os.Readlink(filepath.Join(p, "cwd"))
		if err != nil || (cwd != real && !strings.HasPrefix(cwd, real+"/")) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		out = append(out, filepath.Base(p)+" "+strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "))
	}
	return out
}

// sweepWorkerCopies makes the test's end check that the boot programs'
// copies of the worker binary (/tmp/binNNN/worker, 186 MB each, which
// Beam's boot never removes) are gone once the clusters are down:
// worker-boot.sh removes those its workers run and, at each end, those no
// process has run for a minute; what the last minute's environments left
// is removed by `worker-boot.sh --sweep` with no delay (what a TaskManager
// host's operator can run too), after which none the test made may remain.
func sweepWorkerCopies(t *testing.T, root string) {
	t.Helper()
	before := map[string]bool{}
	dirs, _ := filepath.Glob("/tmp/bin*")
	for _, d := range dirs {
		before[d] = true
	}
	t.Cleanup(func() {
		made := func() []string {
			var out []string
			dirs, _ := filepath.Glob("/tmp/bin*/worker")
			for _, w := range dirs {
				if d := filepath.Dir(w); !before[d] {
					out = append(out, d)
				}
			}
			return out
		}
		left := made()
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "flink", "worker-boot.sh"), "--sweep")
		cmd.Env = append(os.Environ(), "AIPO_WORKER_COPY_STALE=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("worker-boot.sh --sweep: %v\n%s", err, out)
		}
		t.Logf("worker copies: %d that the run's boot programs made were still there when the clusters stopped; worker-boot.sh --sweep removed them", len(left))
		if still := made(); len(still) > 0 {
			t.Errorf("worker copies left after worker-boot.sh --sweep: %v", still)
			for _, d := range still {
				os.RemoveAll(d)
			}
		}
	})
}

// portOf is the port of a host:port address.
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// flinkJobs lists the cluster's jobs as its REST API reports them.
func flinkJobs(rest string) ([]struct {
	ID    string `json:"jid"`
	State string `json:"state"`
	Start int64  `json:"start-time"`
}, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + rest + "/jobs/overview")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Jobs []struct {
			ID    string `json:"jid"`
			State string `json:"state"`
			Start int64  `json:"start-time"`
		} `json:"jobs"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Jobs, err
}

// flinkFailures counts the task failures Flink recorded for its jobs (each
// one restarted the failed region, or failed the job once the restarts
// ran out) and names the first.
func flinkFailures(rest string) (int, string) {
	jobs, err := flinkJobs(rest)
	if err != nil {
		return -1, err.Error()
	}
	c := http.Client{Timeout: 5 * time.Second}
	n, first := 0, ""
	for _, j := range jobs {
		resp, err := c.Get("http://" + rest + "/jobs/" + j.ID + "/exceptions")
		if err != nil {
			return -1, err.Error()
		}
		var v struct {
			History struct {
				Entries []struct {
					Name string `json:"exceptionName"`
					Task string `json:"taskName"`
				} `json:"entries"`
			} `json:"exceptionHistory"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		n += len(v.History.Entries)
		if first == "" && len(v.History.Entries) > 0 {
			e := v.History.Entries[0]
			first = fmt.Sprintf("job %s (%s): %s in %s", j.ID, j.State, e.Name, e.Task)
		}
	}
	return n, first
}

// comparable is a trajectory without what differs from run to run by
// nature (the collaborators' wall-clock latencies).
func comparable(tr schemas.Trajectory) schemas.Trajectory {
	tr.InteractionLatencyMs = nil
	return tr
}

// stepRows reads a committed step and checks it holds each (prompt,
// sample) once and that its manifest lists each shard once; it returns the
// rows ordered by prompt and sample.
func stepRows(t *testing.T, run string, step int64) []schemas.Trajectory {
	t.Helper()
	ctx := context.Background()
	dir := rundir.Step(run, step)
	m, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if seen[f.Path] {
			t.Errorf("%s: the manifest lists %s twice", dir, f.Path)
		}
		seen[f.Path] = true
	}
	rows, _, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	if int64(len(rows)) != m.Rows {
		t.Errorf("%s: %d rows read, the manifest says %d", dir, len(rows), m.Rows)
	}
	keys := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprintf("%s/%d", r.PromptID, r.SampleIndex)
		if keys[k] {
			t.Errorf("%s: trajectory %s appears twice", dir, k)
		}
		keys[k] = true
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].PromptID != rows[j].PromptID {
			return rows[i].PromptID < rows[j].PromptID
		}
		return rows[i].SampleIndex < rows[j].SampleIndex
	})
	return rows
}

// sameSteps reports where two runs' committed steps differ.
func sameSteps(t *testing.T, what string, a, b string, steps ...int64) {
	t.Helper()
	for _, k := range steps {
		ra, rb := stepRows(t, a, k), stepRows(t, b, k)
		if len(ra) == 0 {
			t.Errorf("%s, step %d: prism's run %s committed no trajectories to compare with", what, k, a)
		}
		if len(ra) != len(rb) {
			t.Errorf("%s, step %d: %d trajectories against %d", what, k, len(rb), len(ra))
			continue
		}
		diff := 0
		for i := range ra {
			if !reflect.DeepEqual(comparable(ra[i]), comparable(rb[i])) {
				if diff == 0 {
					t.Errorf("%s, step %d, %s/%d differs from prism's in %s", what, k, ra[i].PromptID, ra[i].SampleIndex, fieldDiff(comparable(ra[i]), comparable(rb[i])))
				}
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%s, step %d: %d of %d trajectories differ", what, k, diff, len(ra))
		} else {
			t.Logf("%s, step %d: the same %d trajectories (token ids, log-probs, rewards, advantages)", what, k, len(ra))
		}
	}
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// analysisSteps reads the per-step figures of the report aipo analyze
// wrote into out, which must hold want steps.
func analysisSteps(t *testing.T, out string, want int) string {
	t.Helper()
	p := filepath.Join(out, analytics.JSONName)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("aipo analyze exited 0 but its report is not there: %v", err)
	}
	var rep struct {
		Steps []json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if len(rep.Steps) != want {
		t.Errorf("%s: %d steps, want %d", p, len(rep.Steps), want)
	}
	steps, _ := json.Marshal(rep.Steps)
	return string(steps)
}

// evalFigures reads aipo eval's per-benchmark and overall figures.
func evalFigures(t *testing.T, out string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Benchmarks []json.RawMessage `json:"benchmarks"`
		Overall    json.RawMessage   `json:"overall"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Benchmarks) == 0 {
		t.Fatalf("%s/report.json has no benchmarks:\n%s", out, b)
	}
	f, _ := json.Marshal(rep)
	return string(f)
}

// killTaskManagerMidStep waits until run's step 0 is committed and a Flink
// job (step 1's rollout) has run for a moment, SIGKILLs the second
// TaskManager by its PID and reports what it did on done.
func killTaskManagerMidStep(ctx context.Context, e beamEngine, run string, done chan<- string) {
	report := "no kill: the run ended before step 1's rollout was seen running"
	defer func() { done <- report }()
	manifest := filepath.Join(rundir.Step(run, 0), rundir.ManifestName)
	var committed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		if committed.IsZero() {
			if _, err := os.Stat(manifest); err == nil {
				committed = time.Now()
			}
			continue
		}
		jobs, err := flinkJobs(e.rest)
		if err != nil {
			continue
		}
		for _, j := range jobs {
			if j.State == "RUNNING" && time.UnixMilli(j.Start).After(committed) && time.Since(time.UnixMilli(j.Start)) > 3*time.Second {
				// The TaskManager running the step's workers: the one
				// whose children (worker-boot.sh, the SDK workers) are up.
				pid, which := busyTaskManager(e.state)
				if pid == 0 {
					continue
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					report = fmt.Sprintf("no kill: SIGKILL %d: %v", pid, err)
					return
				}
				report = fmt.Sprintf("SIGKILL to %s (PID %d, running the step's workers) %.1fs into job %s (step 1's rollout)",
					which, pid, time.Since(time.UnixMilli(j.Start)).Seconds(), j.ID)
				return
			}
		}
	}
}

// serveAlone serves the policy over gRPC decoding one sequence at a time.
// A batch's float32 sums run in another order than a single sequence's
// (OpenBLAS blocks a GEMM by its shape), so a server that batches whatever
// requests arrive together returns log-probs that depend on the engine's
// timing, in the last bits; alone, a request's log-probs depend on the
// request only, and two runners' rollouts can be compared bit for bit.
func serveAlone(t *testing.T, ckpt, addr string) (stop func()) {
	t.Helper()
	return serveWith(t, serve.Options{Checkpoint: ckpt, Name: "policy", Engine: engine.Config{MaxBatch: 1}}, addr, "")
}

// fieldDiff names the fields of two trajectories that differ, with the
// largest difference of a float field.
func fieldDiff(a, b schemas.Trajectory) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		fa, fb := va.Field(i).Interface(), vb.Field(i).Interface()
		if reflect.DeepEqual(fa, fb) {
			continue
		}
		name := va.Type().Field(i).Name
		if x, ok := fa.([]float32); ok {
			y := fb.([]float32)
			worst := float32(0)
			for j := range min(len(x), len(y)) {
				worst = max(worst, float32(math.Abs(float64(x[j]-y[j]))))
			}
			name += fmt.Sprintf(" (lengths %d/%d, max |diff| %.3g)", len(x), len(y), worst)
		} else if x, ok := fa.(float32); ok {
			name += fmt.Sprintf(" (%g against %g)", x, fb.(float32))
		}
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

// busyTaskManager returns the PID and name of a TaskManager that has child
// processes (the PROCESS environment's workers), or 0.
func busyTaskManager(state string) (int, string) {
	pids, _ := filepath.Glob(filepath.Join(state, "taskmanager-*.pid"))
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, c := range tasks {
			if kids, err := os.ReadFile(c); err == nil && len(bytes.TrimSpace(kids)) > 0 {
				return pid, strings.TrimSuffix(filepath.Base(f), ".pid")
			}
		}
	}
	return 0, ""
}

// TestFlinkAndSpark runs aipo's pipelines on a real Flink cluster (one
// JobManager and two TaskManagers, Flink 1.19.3, Beam 2.62.0's Flink job
// server) and on Beam's Spark job server (Spark 3.2.2, local master), the
// workers started by the TaskManagers and Spark's executors in a PROCESS
// environment, and checks each commits what prism commits:
//
//   - aipo train, 3 steps, the learner in this process and the rollouts on
//     Flink, with a TaskManager SIGKILLed while step 1's rollout runs: every
//     step's trajectories (token ids, log-probs, rewards, advantages) equal
//     prism's, committed once, and every checkpoint's weights equal bit for
//     bit;
//   - aipo rollout, 2 steps with the collaborators served by aipo serve, on
//     Flink and on Spark;
//   - aipo eval on a MATH500 slice on Flink: the same figures;
//   - aipo analyze on Flink and on Spark: the same per-step figures.
func TestFlinkAndSpark(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Flink cluster and a Spark job server")
	}
	start := time.Now()
	root := repoRoot(t)
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	gsm8k := shareddata.Path(t, "math/gsm8k/train.jsonl")
	base := t.TempDir()
	rows := oneDigitGSM8K(t, gsm8k, 16)
	train := convertGSM8K(t, base, "gsm8k-one-digit", rows)
	sweepWorkerCopies(t, root) // (a clean-up that runs after the clusters are down)

	flink := startFlink(t, root)
	spark := startSpark(t, root)
	t.Logf("Flink cluster and Spark job server up: %s", time.Since(start).Round(time.Second))

	collabAddr := freeAddr(t)
	config := func(name, policyAddr string) string {
		runDir := filepath.Join(base, name)
		text := tinyRecipe{name: "beam-engines", dir: runDir, steps: 3, train: train, batch: 2,
			policy: "grpc://" + policyAddr, sync: "{kind: aipo, timeout: 60s}", group: 4, loss: "grpo",
			collab: collabAddr}.yaml()
		p := filepath.Join(base, name+".yaml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	warmCfg, err := runconfig.Load(context.Background(), config("warm", "127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(base, "warm")
	warmStartQwen3(t, tok, tokDir, warm, warmCfg, rows, 60, hfmodel.TinyQwen3Config)
	collabDir := filepath.Join(base, "collab")
	if err := hfmodel.WriteDir(collabDir, []byte(hfmodel.TinyQwen3Config), 5, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	defer serveOn(t, collabDir, "collab", "", collabAddr)()
	t.Logf("set-up: %s", time.Since(start).Round(time.Second))

	// aipo train: prism, then Flink with a TaskManager killed mid-step.
	prismAddr, flinkAddr := freeAddr(t), freeAddr(t)
	defer serveAlone(t, warm, prismAddr)()
	defer serveAlone(t, warm, flinkAddr)()
	prismRun, flinkRun := filepath.Join(base, "prism"), filepath.Join(base, "flink")
	t0 := time.Now()
	if code, out := runAipoFor(t, 8*time.Minute, nil, "train", "--config", config("prism", prismAddr), "--init", warm); code != 0 {
		t.Fatalf("aipo train on prism exited %d:\n%s", code, out)
	}
	prismTrain := time.Since(t0)

	flinkCfg := config("flink", flinkAddr)
	args := append([]string{"train", "--config", flinkCfg, "--init", warm}, flink.beamFlags(root)...)
	killed := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go killTaskManagerMidStep(ctx, flink, flinkRun, killed)
	t0 = time.Now()
	code, out := runAipoFor(t, 15*time.Minute, nil, args...)
	cancel()
	kill := <-killed
	t.Logf("TaskManager kill: %s", kill)
	failures, first := flinkFailures(flink.rest)
	t.Logf("Flink recorded %d task failures; the first: %s", failures, first)
	if !strings.HasPrefix(kill, "no kill") && failures < 1 {
		t.Errorf("Flink recorded no task failure after %s", kill)
	}
	if code != 0 {
		// The job failed cleanly: the step did not commit. Bring the
		// TaskManager back and resume, as an operator would.
		t.Logf("aipo train on Flink exited %d after the kill; resuming:\n%s", code, out)
		flink.restart()
		if code, out = runAipoFor(t, 15*time.Minute, nil, args...); code != 0 {
			t.Fatalf("aipo train on Flink, resumed, exited %d:\n%s", code, out)
		}
	} else {
		t.Logf("aipo train on Flink rode out the kill")
	}
	flinkTrain := time.Since(t0)
	t.Logf("aipo train, 3 steps: prism %s, Flink (2 TaskManagers, one killed) %s", prismTrain.Round(time.Second), flinkTrain.Round(time.Second))
	sameSteps(t, "aipo train on Flink", prismRun, flinkRun, 0, 1, 2)
	for k := int64(1); k <= 3; k++ {
		a := fileHash(t, filepath.Join(rundir.Checkpoint(prismRun, k), "model.safetensors"))
		b := fileHash(t, filepath.Join(rundir.Checkpoint(flinkRun, k), "model.safetensors"))
		if a != b {
			t.Errorf("checkpoint %d: prism's weights hash %s, Flink's %s", k, a[:12], b[:12])
		}
	}
	if strings.HasPrefix(kill, "no kill") {
		t.Errorf("the TaskManager kill did not happen: %s", kill)
	}
	flink.restart() // the killed TaskManager, for what follows

	// aipo rollout, 2 steps, from one policy server on the warm model.
	rollAddr := freeAddr(t)
	defer serveAlone(t, warm, rollAddr)()
	runs := map[string]string{}
	for _, on := range []struct {
		name  string
		flags []string
	}{{"prism", nil}, {"flink", flink.beamFlags(root)}, {"spark", spark.beamFlags(root)}} {
		cfg := config("rollout-"+on.name, rollAddr)
		runs[on.name] = filepath.Join(base, "rollout-"+on.name)
		for k := 0; k < 2; k++ {
			t0 := time.Now()
			args := append([]string{"rollout", "--config", cfg, "--step", strconv.Itoa(k), "--policy", "grpc://" + rollAddr}, on.flags...)
			if code, out := runAipoFor(t, 6*time.Minute, nil, args...); code != 0 {
				t.Fatalf("aipo rollout --step %d on %s exited %d:\n%s", k, on.name, code, out)
			}
			t.Logf("aipo rollout --step %d on %s: %s", k, on.name, time.Since(t0).Round(100*time.Millisecond))
		}
	}
	sameSteps(t, "aipo rollout on Flink", runs["prism"], runs["flink"], 0, 1)
	sameSteps(t, "aipo rollout on Spark", runs["prism"], runs["spark"], 0, 1)

	// aipo eval, a MATH500 slice, against the final checkpoint's server.
	evalCfg := filepath.Join(base, "eval.yaml")
	if err := os.WriteFile(evalCfg, []byte("run: beam-engines-eval\nout: unused\npolicy: {label: final}\n"+
		"sampling: {samples: 2, max_tokens: 24}\npass_k: [1, 2]\nchunk_size: 3\n"+
		"benchmarks: [{preset: math500, limit: 6}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	figures := map[string]string{}
	for _, on := range []struct {
		name  string
		flags []string
	}{{"prism", nil}, {"flink", flink.beamFlags(root)}} {
		out := filepath.Join(base, "eval-"+on.name)
		t0 := time.Now()
		args := append([]string{"eval", "--config", evalCfg, "--out", out, "--policy", "grpc://" + prismAddr}, on.flags...)
		if code, text := runAipoFor(t, 6*time.Minute, nil, args...); code != 0 {
			t.Fatalf("aipo eval on %s exited %d:\n%s", on.name, code, text)
		}
		figures[on.name] = evalFigures(t, out)
		t.Logf("aipo eval on %s: %s", on.name, time.Since(t0).Round(100*time.Millisecond))
	}
	if figures["prism"] != figures["flink"] {
		t.Errorf("aipo eval's figures differ:\n  prism: %s\n  Flink: %s", figures["prism"], figures["flink"])
	}

	// aipo analyze of the prism training run, on each engine, each into a
	// directory of its own that does not exist before it runs: an engine
	// that exits 0 without writing cannot pass on another's report.
	analyses := map[string]string{}
	for _, on := range []struct {
		name  string
		flags []string
	}{{"prism", nil}, {"flink", flink.beamFlags(root)}, {"spark", spark.beamFlags(root)}} {
		out := filepath.Join(base, "analysis-"+on.name)
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%s exists before aipo analyze on %s writes it (%v)", out, on.name, err)
		}
		t0 := time.Now()
		args := append([]string{"analyze", "--run", prismRun, "--out", out}, on.flags...)
		if code, text := runAipoFor(t, 6*time.Minute, nil, args...); code != 0 {
			t.Fatalf("aipo analyze on %s exited %d:\n%s", on.name, code, text)
		}
		analyses[on.name] = analysisSteps(t, out, 3)
		t.Logf("aipo analyze on %s: %s", on.name, time.Since(t0).Round(100*time.Millisecond))
	}
	for _, on := range []string{"flink", "spark"} {
		if analyses[on] != analyses["prism"] {
			t.Errorf("aipo analyze on %s: per-step figures differ from prism's:\n  prism: %s\n  %s: %s", on, analyses["prism"], on, analyses[on])
		}
	}
	t.Logf("Flink and Spark: %s in all", time.Since(start).Round(time.Second))
}
