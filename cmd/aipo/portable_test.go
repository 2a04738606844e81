//go:build portable

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/schemas"
)

// TestPortableProcessEnvironment runs aipo analyze the way a Flink cluster
// with a PROCESS environment runs it, on this machine: a portable job
// server (a standalone prism, which speaks the job API of Beam's Flink job
// server) starts the Go SDK's boot program, which fetches the staged
// bin/aipo-worker and starts it in worker mode (--worker=true). It needs
// bin/aipo-worker, bin/beam-boot and build/tools/prism: `make
// check-portable` builds them and runs this test.
func TestPortableProcessEnvironment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(root, "bin", "aipo-worker")
	boot := filepath.Join(root, "bin", "beam-boot")
	prism := filepath.Join(root, "build", "tools", "prism")
	for _, p := range []string{worker, boot, prism} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is missing; `make check-portable` builds it and runs this test", p)
		}
	}
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	rows := []schemas.Trajectory{
		{SchemaVersion: 1, Run: "r", Step: 0, PromptID: "p0", SampleIndex: 0, FinishReason: sampling.FinishEOS,
			ResponseIDs: []int32{5, 6}, TokenSource: []int8{schemas.SourcePolicy, schemas.SourcePolicy},
			BehaviorLogProbs: []float32{-1, -1}, Correct: true, Reward: 1},
		{SchemaVersion: 1, Run: "r", Step: 0, PromptID: "p0", SampleIndex: 1, FinishReason: sampling.FinishEOS,
			ResponseIDs: []int32{7}, TokenSource: []int8{schemas.SourcePolicy}, BehaviorLogProbs: []float32{-2}},
	}
	if _, err := schemas.WriteStep(context.Background(), rundir.Step(run, 0), [][]schemas.Trajectory{rows},
		schemas.Manifest{Run: "r", Step: 0}); err != nil {
		t.Fatal(err)
	}

	// Prism 2.77.0 starts the PROCESS command with --id='ID' (quotes
	// included in the argument); Flink does not. The wrapper strips them.
	wrapper := filepath.Join(dir, "boot.sh")
	script := "#!/bin/bash\nargs=()\nfor a in \"$@\"; do\n  if [[ $a == --id=* ]]; then a=${a//\\'/}; fi\n  args+=(\"$a\")\ndone\nexec " + boot + " \"${args[@]}\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	js := exec.CommandContext(ctx, prism, fmt.Sprintf("--job_port=%d", port), "--serve_http=false")
	var jsLog strings.Builder
	js.Stdout, js.Stderr = &jsLog, &jsLog
	// The job server, the boot programs it starts and the workers they
	// start (which wait to be killed once their work is done) share one
	// process group, ended as a whole.
	js.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The boot program writes pipeline_options.json into its working
	// directory, which it inherits from the job server.
	js.Dir = dir
	// The boot program copies the worker binary (about 180 MB) into a new
	// directory /tmp/binNNN (a fixed /tmp, whatever TMPDIR says) and leaves
	// it there: the test removes the copies its workers run from
	// (workerCopies) when it stops them.
	js.Env = append(os.Environ(), "TMPDIR="+dir)
	js.WaitDelay = 5 * time.Second
	if err := js.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		copies := workerCopies(js.Process.Pid)
		_ = syscall.Kill(-js.Process.Pid, syscall.SIGKILL)
		_ = js.Wait()
		for _, c := range copies {
			os.RemoveAll(c)
		}
	}()
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", endpoint)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job server did not come up on %s; its log:\n%s", endpoint, jsLog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, out := runAipo(t, "analyze", "--run", run, "--runner=universal", "--endpoint="+endpoint,
		"--environment_type=PROCESS", `--environment_config={"command":"`+wrapper+`"}`, "--worker_binary="+worker)
	if code != 0 {
		t.Fatalf("aipo analyze on the portable runner exited %d; output:\n%s\njob server log:\n%s", code, out, jsLog.String())
	}
	b, err := os.ReadFile(filepath.Join(run, "analysis", analytics.JSONName))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Steps []analytics.StepMetrics `json:"steps"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Trajectories != 2 || rep.Steps[0].Accuracy != 0.5 {
		t.Fatalf("analysis.json = %s; want one step of 2 trajectories at accuracy 0.5", b)
	}
}

// workerCopies is the /tmp/bin* directory of each process of process group
// pgid that runs a copy of the worker binary the Go SDK's boot program made
// there (the boot program never removes it).
func workerCopies(pgid int) []string {
	var dirs []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue
		}
		// After the command name: state, ppid, pgrp, ...
		i := strings.LastIndexByte(string(stat), ')')
		if f := strings.Fields(string(stat[i+1:])); i < 0 || len(f) < 3 || f[2] != fmt.Sprint(pgid) {
			continue
		}
		exe, err := os.Readlink(filepath.Join(p, "exe"))
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if d := filepath.Dir(exe); strings.HasPrefix(d, "/tmp/bin") && filepath.Base(exe) == "worker" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
