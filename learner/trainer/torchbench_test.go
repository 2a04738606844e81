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
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/benchstat"
	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// stepBenchSteps are the timed steps of each process, after its warm-up
// (one step for aipo and PyTorch eager, two for torch.compile, whose first
// step compiles); stepBenchRounds the processes of each side, alternated.
const (
	stepBenchSteps  = 5
	stepBenchRounds = 3
)

// torchStepVariants are the PyTorch sides of BenchmarkStepVsPyTorch, as
// scripts/torch_step_bench.py names them: transformers' model classes
// (hf), a module written for the step (lean) and that module under
// torch.compile (compile).
var torchStepVariants = []string{"hf", "lean", "compile"}

// stepBenchChildEnv names the shape a child process of
// BenchmarkStepVsPyTorch runs (TestStepBenchChild); stepBenchPrecisionEnv
// its learner.precision (empty: fp32).
const (
	stepBenchChildEnv     = "AIPO_STEP_BENCH_CHILD"
	stepBenchPrecisionEnv = "AIPO_STEP_BENCH_PRECISION"
)

// stepResult is what one process of either side reports.
type stepResult struct {
	Variant      string    `json:"variant,omitempty"`
	Torch        string    `json:"torch,omitempty"`
	Transformers string    `json:"transformers,omitempty"`
	Optimizer    string    `json:"optimizer,omitempty"`
	Threads      int       `json:"threads"`
	Params       int64     `json:"params"`
	Tokens       int       `json:"tokens_per_step"`
	Warmup       []float64 `json:"warmup_seconds,omitempty"`
	Seconds      []float64 `json:"step_seconds"`
	// StartRSS is the process's resident memory once started, before its
	// model (PyTorch's: torch and transformers imported).
	StartRSS int64   `json:"start_rss_bytes"`
	peak     int64   // bytes, getrusage of the process
	load     float64 // the 1-minute load average as the process ended
	raw      []byte  // the JSON line as printed (the LoRA sides read more of it)
}

// stepSide is the processes of one side of one shape.
type stepSide []stepResult

// rate is the side's tokens/s at its median step over all its processes.
func (s stepSide) rate() float64 { return float64(s[0].Tokens) / benchstat.Median(s.steps()) }

// rateRange is the side's tokens/s at its slowest and fastest steps.
func (s stepSide) rateRange() (lo, hi float64) {
	st := s.steps()
	return float64(s[0].Tokens) / st[len(st)-1], float64(s[0].Tokens) / st[0]
}

// net is the largest peak of the side's processes less that process's
// resident memory once started.
func (s stepSide) net() int64 {
	var p int64
	for _, r := range s {
		p = max(p, r.peak-r.StartRSS)
	}
	return p
}

// peak is the largest peak resident memory of the side's processes.
func (s stepSide) peak() int64 {
	var p int64
	for _, r := range s {
		p = max(p, r.peak)
	}
	return p
}

// steps are the timed steps of every process of the side, sorted.
func (s stepSide) steps() []float64 {
	var all []float64
	for _, r := range s {
		all = append(all, r.Seconds...)
	}
	slices.Sort(all)
	return all
}

// spread says the side's fastest, median and slowest timed step, and the
// 1-minute load average its processes ended under (their own threads
// counted): on a shared machine the rates are read against it.
func (s stepSide) spread() string {
	st := s.steps()
	lo, hi := s[0].load, s[0].load
	for _, r := range s {
		lo, hi = min(lo, r.load), max(hi, r.load)
	}
	return fmt.Sprintf("steps min %.3f / median %.3f / max %.3f s over %d; load average %.2f to %.2f", st[0], st[len(st)/2], st[len(st)-1], len(st), lo, hi)
}

// BenchmarkStepVsPyTorch times the CPU learner's training step (forward,
// mean log-prob loss, backward, gradient clipping, AdamW; float32;
// trainer.Learner.SFTStep) against the same step in PyTorch written as its
// users write it (scripts/torch_step_bench.py, the pinned environment of
// scripts/vllm.sh), in three variants: transformers' model classes with
// sdpa attention (hf), a module written for the step (lean) and that module
// under torch.compile (compile), each with F.cross_entropy's fused loss and
// AdamW(fused=True), on the same shapes and thread count. Each side runs in
// processes of its own, alternated (aipo, hf, lean, compile, aipo, hf, ...;
// stepBenchRounds processes a side), so that all sample the same moments of
// the machine and each peak resident memory is the whole process's
// (getrusage). PyTorch runs as its CPU performance tuning guide says, with
// TCMalloc and Intel OpenMP preloaded (testtools.CPUPreloads). tokens/s is
// the median step's over all processes of a side (the slowest and fastest
// steps' are logged beside it); the peak is the largest, reported raw and
// net of the process's resident memory once started (PyTorch's import of
// torch and transformers, about 900 MiB of PyPI's CUDA build, is not the
// step's). Reported per shape and variant: torch-VARIANT-tokens/s,
// ratio-tokens/s-VARIANT (aipo over that variant), torch-VARIANT-peak-MiB,
// ratio-peak-rss-VARIANT and ratio-net-peak-VARIANT; the headline
// ratio-tokens/s and ratio-peak-rss are against the fastest variant (target
// >= 1.5 and <= 0.5). With -short (make bench-smoke) it runs the 0.8M
// shape alone, one process a side, every variant: torch.compile compiled
// that shape in 39 s from a cold cache on this 2-core machine, under the
// minute that would justify leaving it out.
func BenchmarkStepVsPyTorch(b *testing.B) {
	py := testtools.TorchPython(b)
	// PyTorch as its CPU performance tuning guide runs it: TCMalloc and
	// Intel OpenMP preloaded.
	preload, err := testtools.CPUPreloads(py)
	if err != nil {
		b.Fatal(err)
	}
	threads := runtime.GOMAXPROCS(0)
	shapes, rounds := benchShapes(stepBenchShapes)
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			cfgPath := sh.configFile(b)
			var ours stepSide
			theirs := make([]stepSide, len(torchStepVariants))
			self := []string{os.Args[0], "-test.run", "^TestStepBenchChild$", "-test.count=1"}
			torch := func(variant string) []string {
				return []string{py, filepath.Join(testtools.RepoRoot(), "scripts", "torch_step_bench.py"), variant, cfgPath,
					strconv.Itoa(sh.batch), strconv.Itoa(sh.seq), strconv.Itoa(stepBenchSteps), strconv.Itoa(threads)}
			}
			for range rounds {
				ours = append(ours, runStepProcess(b, "aipo", []string{stepBenchChildEnv + "=" + sh.name}, self))
				for i, v := range torchStepVariants {
					theirs[i] = append(theirs[i], runStepProcess(b, "PyTorch "+v, []string{"LD_PRELOAD=" + preload}, torch(v)))
				}
			}
			ra, pa := ours.rate(), ours.peak()
			b.ReportMetric(ra, "aipo-tokens/s")
			b.ReportMetric(float64(pa)/(1<<20), "aipo-peak-MiB")
			alo, ahi := ours.rateRange()
			b.ReportMetric(float64(ours.net())/(1<<20), "aipo-net-peak-MiB")
			b.Logf("%s (%.1fM parameters, %d threads): aipo %.0f [%.0f-%.0f] tokens/s, %.0f MiB (net of start-up %.0f); %s",
				sh.name, float64(ours[0].Params)/1e6, threads, ra, alo, ahi, float64(pa)/(1<<20), float64(ours.net())/(1<<20), ours.spread())
			fastest := 0
			for i, v := range torchStepVariants {
				t := theirs[i]
				if t[0].Params != ours[0].Params {
					b.Fatalf("aipo's model has %d parameters, PyTorch %s's %d: not the same shape", ours[0].Params, v, t[0].Params)
				}
				rt, pt := t.rate(), t.peak()
				b.ReportMetric(rt, "torch-"+v+"-tokens/s")
				b.ReportMetric(ra/rt, "ratio-tokens/s-"+v)
				b.ReportMetric(float64(pt)/(1<<20), "torch-"+v+"-peak-MiB")
				b.ReportMetric(float64(pa)/float64(pt), "ratio-peak-rss-"+v)
				tlo, thi := t.rateRange()
				b.ReportMetric(float64(ours.net())/float64(t.net()), "ratio-net-peak-"+v)
				b.Logf("%s PyTorch %s (torch %s, transformers %s, %s; TCMalloc and Intel OpenMP preloaded; warm-up %s s): %.0f [%.0f-%.0f] tokens/s, %.0f MiB (net of start-up %.0f); %s",
					sh.name, v, t[0].Torch, t[0].Transformers, t[0].Optimizer, warmups(t), rt, tlo, thi, float64(pt)/(1<<20), float64(t.net())/(1<<20), t.spread())
				if rt > theirs[fastest].rate() {
					fastest = i
				}
			}
			rt, pt := theirs[fastest].rate(), theirs[fastest].peak()
			b.ReportMetric(rt, "torch-tokens/s")
			b.ReportMetric(ra/rt, "ratio-tokens/s")
			b.ReportMetric(float64(pt)/(1<<20), "torch-peak-MiB")
			b.ReportMetric(float64(pa)/float64(pt), "ratio-peak-rss")
			b.Logf("%s: the fastest PyTorch variant is %s; aipo has %.2fx its tokens/s at %.2f of its peak memory",
				sh.name, torchStepVariants[fastest], ra/rt, float64(pa)/float64(pt))
		})
	}
}

// BenchmarkBF16StepVsAutocast times the CPU learner's training step with
// learner.precision bf16 (the model's bfloat16 products, SetComputeBF16;
// trainer.Learner.SFTStep as BenchmarkStepVsPyTorch's) against the same
// step in PyTorch under torch.autocast("cpu", dtype=torch.bfloat16)
// (scripts/torch_step_bench.py hf --autocast: transformers' model
// classes, float32 parameters, gradients and AdamW(fused=True)) and
// against our own float32 step, on the same shapes and thread count,
// PyTorch with TCMalloc and Intel OpenMP preloaded as
// BenchmarkStepVsPyTorch runs it. The three run in processes of their
// own, alternated round by round (aipo bf16, aipo fp32, PyTorch autocast,
// then again; stepBenchRounds processes a side), so that all sample the
// same moments of the machine. Reported per shape: each side's tokens/s
// at its median timed step (stepSide.rate) with the range of its steps
// (slowest to fastest) logged, ratio-bf16-vs-autocast (aipo bf16 over
// PyTorch autocast, medians; the target is 1.5) and ratio-bf16-vs-fp32
// (aipo bf16 over aipo fp32), and each side's peak resident memory. With
// -short (make bench-smoke) it runs the 0.8M shape alone, one round.
func BenchmarkBF16StepVsAutocast(b *testing.B) {
	py := testtools.TorchPython(b)
	preload, err := testtools.CPUPreloads(py)
	if err != nil {
		b.Fatal(err)
	}
	threads := runtime.GOMAXPROCS(0)
	shapes, rounds := benchShapes(stepBenchShapes)
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			cfgPath := sh.configFile(b)
			self := []string{os.Args[0], "-test.run", "^TestStepBenchChild$", "-test.count=1"}
			torch := []string{py, filepath.Join(testtools.RepoRoot(), "scripts", "torch_step_bench.py"), "hf", cfgPath,
				strconv.Itoa(sh.batch), strconv.Itoa(sh.seq), strconv.Itoa(stepBenchSteps), strconv.Itoa(threads), "--autocast"}
			var bf, fp, ac stepSide
			for range rounds {
				bf = append(bf, runStepProcess(b, "aipo bf16", []string{stepBenchChildEnv + "=" + sh.name, stepBenchPrecisionEnv + "=bf16"}, self))
				fp = append(fp, runStepProcess(b, "aipo fp32", []string{stepBenchChildEnv + "=" + sh.name, stepBenchPrecisionEnv + "=fp32"}, self))
				ac = append(ac, runStepProcess(b, "PyTorch autocast", []string{"LD_PRELOAD=" + preload}, torch))
			}
			if ac[0].Params != bf[0].Params {
				b.Fatalf("aipo's model has %d parameters, PyTorch's %d: not the same shape", bf[0].Params, ac[0].Params)
			}
			for _, side := range []struct {
				name string
				s    stepSide
			}{{"aipo-bf16", bf}, {"aipo-fp32", fp}, {"torch-autocast", ac}} {
				med := side.s.rate()
				lo, hi := side.s.rateRange()
				b.ReportMetric(med, side.name+"-tokens/s")
				b.ReportMetric(float64(side.s.peak())/(1<<20), side.name+"-peak-MiB")
				b.Logf("%s (%.1fM parameters, %d threads) %s: median %.0f tokens/s (range %.0f to %.0f), peak %.0f MiB; %s",
					sh.name, float64(bf[0].Params)/1e6, threads, side.name, med, lo, hi, float64(side.s.peak())/(1<<20), side.s.spread())
			}
			mb, mf, ma := bf.rate(), fp.rate(), ac.rate()
			b.ReportMetric(mb/ma, "ratio-bf16-vs-autocast")
			b.ReportMetric(mb/mf, "ratio-bf16-vs-fp32")
			b.Logf("%s: aipo bf16 has %.2fx the tokens/s of PyTorch %s under autocast (torch %s, transformers %s, TCMalloc and Intel OpenMP preloaded; target 1.5) and %.2fx aipo fp32's (medians of %d rounds)",
				sh.name, mb/ma, ac[0].Variant, ac[0].Torch, ac[0].Transformers, mb/mf, rounds)
		})
	}
}

// warmups lists the untimed warm-up steps of each process of a side, in
// seconds (torch.compile's first is its compilation).
func warmups(s stepSide) string {
	var w []string
	for _, r := range s {
		for _, x := range r.Warmup {
			w = append(w, strconv.FormatFloat(x, 'f', 1, 64))
		}
	}
	return strings.Join(w, ", ")
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
			r.raw, found = []byte(line), true
		}
	}
	if !found || len(r.Seconds) == 0 {
		b.Fatalf("%s step benchmark printed no result:\n%s%s", side, out.String(), errb.String())
	}
	r.peak = meminfo.Peak(c.ProcessState)
	r.load = loadAverage()
	return r
}

// stepProfileEnv names a file for a CPU profile of TestStepBenchChild's
// timed steps alone, the span that scripts/torch_step_bench.py --profile
// covers: -test.cpuprofile would add the model's initialisation and the
// warm-up step, whose first touch of AdamW's moments is not the step's cost.
const stepProfileEnv = "AIPO_STEP_BENCH_CPUPROFILE"

// startStepProfile starts the CPU profile that stepProfileEnv asks for, if
// any, and stops it when the test ends.
func startStepProfile(t *testing.T) {
	path := os.Getenv(stepProfileEnv)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg), or
// -1 where it cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return -1
	}
	return f
}

// benchShapes are the shapes and the processes a side a benchmark over
// shapes runs: all of them, stepBenchRounds each; with -short (make
// bench-smoke) the first alone, one process a side.
func benchShapes(shapes []stepBenchShape) ([]stepBenchShape, int) {
	if testing.Short() {
		return shapes[:1], 1
	}
	return shapes, stepBenchRounds
}

// configFile writes the shape's config.json into a temporary directory
// of b, for the PyTorch side, and returns its path.
func (sh stepBenchShape) configFile(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(sh.config), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchChildShape is the shape, and its parsed config, that the
// benchmark named bench gave its child process in the variable env among
// shapes; outside such a process the test skips ("run by BENCH").
func benchChildShape(t *testing.T, env, bench string, shapes []stepBenchShape) (stepBenchShape, model.Config) {
	t.Helper()
	name := os.Getenv(env)
	if name == "" {
		t.Skip("run by " + bench)
	}
	i := slices.IndexFunc(shapes, func(s stepBenchShape) bool { return s.name == name })
	if i < 0 {
		t.Fatalf("%s=%q names no shape", env, name)
	}
	c, err := hfconfig.Parse([]byte(shapes[i].config))
	if err != nil {
		t.Fatal(err)
	}
	return shapes[i], c
}

// TestStepBenchChild is the aipo side of one BenchmarkStepVsPyTorch
// process; it runs only when the benchmark starts it.
func TestStepBenchChild(t *testing.T) {
	startRSS, err := meminfo.Status(0, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	sh, c := benchChildShape(t, stepBenchChildEnv, "BenchmarkStepVsPyTorch", stepBenchShapes)
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
	switch p := os.Getenv(stepBenchPrecisionEnv); p {
	case "", backend.FP32:
	case backend.BF16:
		m.SetComputeBF16(true) // what the CPU backend's Train does for learner.precision bf16
	default:
		t.Fatalf("%s=%q: give fp32 or bf16", stepBenchPrecisionEnv, p)
	}
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
	res := stepResult{Threads: runtime.GOMAXPROCS(0), Params: params, Tokens: sh.batch * sh.seq, StartRSS: startRSS}
	for k := range stepBenchSteps + 1 {
		if k == 1 {
			startStepProfile(t)
		}
		t0 := time.Now()
		if _, _, err := l.SFTStep(seqs, 1<<20); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			res.Warmup = append(res.Warmup, time.Since(t0).Seconds())
		} else {
			res.Seconds = append(res.Seconds, time.Since(t0).Seconds())
		}
	}
	j, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(j))
}
