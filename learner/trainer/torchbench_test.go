//go:build torch

package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// stepBenchSteps are the timed steps of each process (after one warm-up);
// stepBenchRounds the processes of each side, alternated.
const (
	stepBenchSteps  = 3
	stepBenchRounds = 2
)

// stepBenchChildEnv names the shape a child process of
// BenchmarkStepVsPyTorch runs (TestStepBenchChild).
const stepBenchChildEnv = "AIPO_STEP_BENCH_CHILD"

// stepResult is what one process of either side reports.
type stepResult struct {
	Torch        string    `json:"torch,omitempty"`
	Transformers string    `json:"transformers,omitempty"`
	Threads      int       `json:"threads"`
	Params       int64     `json:"params"`
	Tokens       int       `json:"tokens_per_step"`
	Seconds      []float64 `json:"step_seconds"`
	peak         int64     // bytes, getrusage of the process
}

// BenchmarkStepVsPyTorch times the CPU learner's training step (forward,
// mean log-prob loss, backward, gradient clipping, AdamW; float32;
// trainer.Learner.SFTStep) against the same step in current PyTorch eager
// (scripts/torch_step_bench.py: transformers' model classes, sdpa
// attention, torch.optim.AdamW; the pinned environment of scripts/vllm.sh)
// on the same shapes and thread count. Each side runs in processes of its
// own, alternated (aipo, PyTorch, aipo, PyTorch), so that both sample the
// same moments of the machine and each peak resident memory is the whole
// process's (getrusage). tokens/s is the fastest step's over all processes
// of a side; the peak is the largest. Reported per shape: ratio-tokens/s
// (aipo over PyTorch; target >= 1.5) and ratio-peak-rss (aipo over
// PyTorch; target <= 0.5). With -short (make bench-smoke) it runs the
// 0.8M shape alone, one process a side.
func BenchmarkStepVsPyTorch(b *testing.B) {
	py := testtools.TorchPython(b)
	threads := runtime.GOMAXPROCS(0)
	shapes, rounds := stepBenchShapes, stepBenchRounds
	if testing.Short() {
		shapes, rounds = shapes[:1], 1
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			cfgPath := filepath.Join(b.TempDir(), "config.json")
			if err := os.WriteFile(cfgPath, []byte(sh.config), 0o644); err != nil {
				b.Fatal(err)
			}
			var ours, theirs []stepResult
			self := []string{os.Args[0], "-test.run", "^TestStepBenchChild$", "-test.count=1"}
			torch := []string{py, filepath.Join(testtools.RepoRoot(), "scripts", "torch_step_bench.py"), cfgPath,
				strconv.Itoa(sh.batch), strconv.Itoa(sh.seq), strconv.Itoa(stepBenchSteps), strconv.Itoa(threads)}
			for range rounds {
				ours = append(ours, runStepProcess(b, "aipo", []string{stepBenchChildEnv + "=" + sh.name}, self))
				theirs = append(theirs, runStepProcess(b, "PyTorch", nil, torch))
			}
			if ours[0].Params != theirs[0].Params {
				b.Fatalf("aipo's model has %d parameters, PyTorch's %d: not the same shape", ours[0].Params, theirs[0].Params)
			}
			rate := func(rs []stepResult) float64 {
				best := rs[0].Seconds[0]
				for _, r := range rs {
					best = min(best, slices.Min(r.Seconds))
				}
				return float64(rs[0].Tokens) / best
			}
			peak := func(rs []stepResult) int64 {
				var p int64
				for _, r := range rs {
					p = max(p, r.peak)
				}
				return p
			}
			ra, rt := rate(ours), rate(theirs)
			pa, pt := peak(ours), peak(theirs)
			b.ReportMetric(ra, "aipo-tokens/s")
			b.ReportMetric(rt, "torch-tokens/s")
			b.ReportMetric(ra/rt, "ratio-tokens/s")
			b.ReportMetric(float64(pa)/(1<<20), "aipo-peak-MiB")
			b.ReportMetric(float64(pt)/(1<<20), "torch-peak-MiB")
			b.ReportMetric(float64(pa)/float64(pt), "ratio-peak-rss")
			b.Logf("%s (%.1fM parameters, %d threads; PyTorch %s, transformers %s): aipo %.0f tokens/s, %.0f MiB; PyTorch %.0f tokens/s, %.0f MiB",
				sh.name, float64(ours[0].Params)/1e6, threads, theirs[0].Torch, theirs[0].Transformers, ra, float64(pa)/(1<<20), rt, float64(pt)/(1<<20))
		})
	}
}

// runStepProcess runs one side's process, argv with env added to this
// process's environment, for at most 15 minutes, and reads its JSON line
// and peak memory.
func runStepProcess(b *testing.B, side string, env, argv []string) stepResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		b.Fatalf("%s step benchmark: %v\n%s%s", side, err, out.String(), errb.String())
	}
	var r stepResult
	found := false
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				b.Fatalf("%s step benchmark printed %q: %v", side, line, err)
			}
			found = true
		}
	}
	if !found || len(r.Seconds) == 0 {
		b.Fatalf("%s step benchmark printed no result:\n%s%s", side, out.String(), errb.String())
	}
	r.peak = meminfo.Peak(c.ProcessState)
	return r
}

// TestStepBenchChild is the aipo side of one BenchmarkStepVsPyTorch
// process; it runs only when the benchmark starts it.
func TestStepBenchChild(t *testing.T) {
	name := os.Getenv(stepBenchChildEnv)
	if name == "" {
		t.Skip("run by BenchmarkStepVsPyTorch")
	}
	i := slices.IndexFunc(stepBenchShapes, func(s stepBenchShape) bool { return s.name == name })
	if i < 0 {
		t.Fatalf("%s=%q names no shape", stepBenchChildEnv, name)
	}
	sh := stepBenchShapes[i]
	c, err := hfconfig.Parse([]byte(sh.config))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay = 1e-5, 0
	opt, err := optim.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	l := &Learner{Policy: m, Opt: opt}
	r := rand.New(rand.NewPCG(1, 2))
	seqs := make([]Sequence, sh.batch)
	for s := range seqs {
		toks := make([]int32, sh.seq)
		for j := range toks {
			toks[j] = int32(r.IntN(c.VocabSize))
		}
		seqs[s] = Sequence{Prompt: toks[:1], Response: toks[1:]}
	}
	var params int64
	for _, p := range m.Params() {
		params += int64(len(p.Data))
	}
	res := stepResult{Threads: runtime.GOMAXPROCS(0), Params: params, Tokens: sh.batch * sh.seq}
	for k := range stepBenchSteps + 1 {
		t0 := time.Now()
		if _, _, err := l.SFTStep(seqs, 1<<20); err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			res.Seconds = append(res.Seconds, time.Since(t0).Seconds())
		}
	}
	j, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(j))
}
