// The rollout, eval and analytics pipelines run unchanged on Beam's portable
// ("universal") runner, the job API that Flink's job server speaks, against
// a standalone prism job server bound to 127.0.0.1, with the SDK harness in
// the test process (--environment_type=LOOPBACK). The test sits with the
// analytics pipeline, the last of the three it runs.
package analytics_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	_ "github.com/aipo-rl/aipo/inproc" // inproc:// policy endpoints
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/pipelines/eval"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
)

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startJobServer runs prism as its own process with the web UI off and
// waits until its job port accepts connections.
func startJobServer(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(testtools.Binary(t, "prism", "./internal/beamrun/cmd/prism"), "--job_port", strconv.Itoa(port), "--serve_http=false", "--log_level=warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prism job server did not listen on %s within 60s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkLoopbackOnly(t, cmd.Process.Pid, port)
	return addr
}

// checkLoopbackOnly reads /proc/net/tcp{,6}: every socket listening on the
// job port must be bound to a loopback address.
func checkLoopbackOnly(t *testing.T, pid, port int) {
	t.Helper()
	found := 0
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			t.Logf("cannot check listening addresses in %s: %v", name, err)
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			hostPort := strings.Split(fields[1], ":")
			if len(hostPort) != 2 {
				continue
			}
			p, err := strconv.ParseInt(hostPort[1], 16, 32)
			if err != nil || int(p) != port {
				continue
			}
			found++
			switch hostPort[0] {
			case "0100007F", "00000000000000000000000001000000":
			default:
				t.Errorf("prism (pid %d) listens on port %d at address %s (hex), not loopback", pid, port, hostPort[0])
			}
		}
		f.Close()
	}
	if found == 0 {
		t.Logf("no listening socket for port %d found in /proc/net (not Linux?)", port)
	}
}

// universal points Beam at the job server, as a Flink job server would be
// used, with the SDK harness in this process, and restores the flags after.
func universal(t *testing.T, endpoint string) {
	t.Helper()
	set := map[string]string{"runner": "universal", "endpoint": endpoint, "environment_type": "LOOPBACK"}
	for name, v := range set {
		f := flag.Lookup(name)
		if f == nil {
			t.Fatalf("Beam flag --%s is not registered", name)
		}
		old := f.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
}

// The rollout, analytics and eval pipelines run unchanged on the universal
// runner against a standalone job server.
func TestPipelinesOnUniversalRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a standalone job server")
	}
	endpoint := startJobServer(t)
	universal(t, endpoint)
	ctx := context.Background()
	dir := t.TempDir()
	run := filepath.Join(dir, "run")

	// A small random policy over the demo's vocabulary at checkpoint 0.
	size := demo.ModelSize{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 2, Intermediate: 64, Context: 128}
	m, err := model.New(size.ModelConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	ck := rundir.Checkpoint(run, 0)
	if err := demo.SavePolicy(ctx, ck, m, nil, checkpoint.TrainerState{}); err != nil {
		t.Fatal(err)
	}

	// Rollout: one step of the demo task with the built-in collaborators.
	cfg, err := runconfig.Parse([]byte(fmt.Sprintf(`
run: {name: portable, dir: %q, seed: 3}
data: {demo: true, batch_size: 6}
policy: {endpoint: "inproc://%s?max_batch=16", max_response_tokens: 16, stop: [";"]}
rollout: {group_size: 2, opener_by: policy, answer_token_budget: 6, max_in_flight: 8, prompt_template: "{{.Problem}}"}
`, run, ck)), "portable.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	// The lease of the run, as aipo rollout takes it.
	lease, lctx, err := runlease.Acquire(ctx, run, runlease.Options{Command: "aipo rollout"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	man, err := rollout.Run(lctx, rollout.Options{Config: cfg, Step: 0})
	if err != nil {
		t.Fatalf("rollout on the universal runner: %v", err)
	}
	rows, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(run, 0))
	if err != nil {
		t.Fatal(err)
	}
	if man.Rows != 12 || len(rows) != 12 {
		t.Fatalf("rollout wrote %d rows (manifest %d), want 6 prompts x 2 samples", len(rows), man.Rows)
	}

	// Analytics over the run.
	if _, err := analytics.Run(ctx, analytics.Options{Run: run, Steps: analytics.AllSteps}); err != nil {
		t.Fatalf("analytics on the universal runner: %v", err)
	}
	if !fileExists(filepath.Join(run, "analysis", analytics.JSONName)) {
		t.Fatalf("analytics wrote no %s", analytics.JSONName)
	}

	// Eval of the checkpoint on a small prompt file.
	probs := filepath.Join(dir, "problems.jsonl")
	var lines []string
	for i := 0; i < 5; i++ {
		lines = append(lines, fmt.Sprintf(`{"id": "p%d", "problem": "%d+%d?", "answer": "%d"}`, i, i, i+1, 2*i+1))
	}
	if err := os.WriteFile(probs, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "eval")
	ecfg, err := evalconfig.Parse([]byte(fmt.Sprintf(`
run: portable
out: %s
policy: {uri: "inproc://%s?max_batch=16", label: random-init}
sampling: {samples: 2, max_tokens: 6, seed: 3}
pass_k: [1, 2]
chunk_size: 2
benchmarks:
  - {name: sums, path: %s, verifier: integer, template: plain}
`, out, ck, probs)), "portable-eval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, plan, err := eval.Run(ctx, ecfg)
	if err != nil {
		t.Fatalf("eval on the universal runner: %v", err)
	}
	if !rep.Complete || plan.Todo != 3 {
		t.Fatalf("eval: complete %v, %d chunks run; want a complete report from 3 chunks", rep.Complete, plan.Todo)
	}
}
