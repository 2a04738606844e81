//go:build torch

package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// torchrun (PyTorch 2.13's, from the environment scripts/vllm.sh makes)
// launches aipo train as it launches any program (--no-python): its agent
// holds MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE, the ranks'
// store takes the next port, and the run ends with --nproc 1's bits.
func TestTrainUnderTorchrun(t *testing.T) {
	torchrun := filepath.Join(filepath.Dir(testtools.TorchPython(t)), "torchrun")
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	cfg, ref := ranksRun(t, warm, 3)
	if code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", cfg, "--no-tensorboard", "--nproc", "1"); code != 0 {
		t.Fatalf("--nproc 1 exited %d:\n%s", code, out)
	}
	cfg2, run := ranksRun(t, warm, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, torchrun, "--nproc-per-node", "2", "--master-port", freePortPair(t), "--no-python",
		os.Args[0], "train", "--config", cfg2, "--no-tensorboard")
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("torchrun --nproc-per-node 2 --no-python aipo train: %v\n%s", err, out)
	}
	if got, want := finalDigest(t, run, 3), finalDigest(t, ref, 3); got != want {
		t.Errorf("under torchrun: %s, --nproc 1: %s", got, want)
	}
	t.Logf("torchrun, 2 ranks: %s (%s)", finalDigest(t, run, 3), time.Since(t0).Round(time.Millisecond))
}

// freePortPair is a port P such that P and P+1 are both free now: torchrun
// holds P and the ranks' store listens on P+1 (a free P alone once met a
// P+1 that another process held, and rank 0 could not serve the store).
func freePortPair(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			next.Close()
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no two consecutive free ports on 127.0.0.1 in 50 tries")
	return ""
}
