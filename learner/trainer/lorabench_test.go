//go:build torch

package trainer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/peft"
)

// The LoRA step benchmark's adapter: rank, alpha and targets on both sides.
const (
	loraBenchRank  = 16
	loraBenchAlpha = 32
)

var loraBenchTargets = peft.Targets

// loraBenchShapes are the models of BenchmarkLoRAStepAgainstPEFT: Qwen3-0.6B's
// layer shape (hidden 1024, MLP 3072, 16 query and 8 key/value heads of
// 128, its 151936-token vocabulary) in 2 layers, the smallest (-short),
// then its 28.
var loraBenchShapes = []stepBenchShape{
	stepBenchShapes[slices.IndexFunc(stepBenchShapes, func(s stepBenchShape) bool { return s.name == "qwen3-0.6B-2layers" })],
	{"qwen3-0.6B", 1, 512, `{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
  "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
  "attention_bias": false, "hidden_act": "silu", "torch_dtype": "float32"}`},
}

// loraBenchChildEnv names the shape a child process of
// BenchmarkLoRAStepAgainstPEFT runs (TestLoRABenchChild).
const loraBenchChildEnv = "AIPO_LORA_BENCH_CHILD"

// loraResult is stepResult with what the LoRA sides add.
type loraResult struct {
	stepResult
	PEFT      string `json:"peft,omitempty"`
	Trainable int64  `json:"trainable"`
	// ReadyRSS is the process's resident memory once its model, adapters
	// and optimiser are built, before the first step.
	ReadyRSS int64 `json:"ready_rss_bytes"`
}

// BenchmarkLoRAStepAgainstPEFT times the CPU learner's LoRA training step
// (trainer.Learner.SFTStep on a policy with an adapter attached: forward,
// mean log-prob loss, backward through the frozen base into the adapters
// alone, clipping, AdamW over the adapters; float32) against the same step
// with Hugging Face PEFT on PyTorch (scripts/torch_lora_bench.py in the
// pinned environment of scripts/vllm.sh: transformers' Qwen3 class with
// sdpa attention wrapped by peft.get_peft_model, AdamW fused), with the
// same rank (16), alpha (32), targets (all seven projections), dtype
// (float32), dropout (0) and thread count, at Qwen3-0.6B's shape. Each side
// runs in processes of its own, alternated (aipo, PEFT; PEFT, aipo; aipo,
// PEFT), so that both sample the same moments of the machine; PEFT's with
// TCMalloc and Intel OpenMP preloaded, as PyTorch's CPU tuning guide runs
// it (testtools.CPUPreloads). tokens/s is at the median of a side's timed
// steps over its processes (min, median and max logged with the load
// average); memory is each process's peak resident
// memory (getrusage) net of its resident memory once its model, adapters
// and optimiser are built (start-up: the base's weights, the runtime),
// the largest over a side's processes. Reported: aipo- and peft-tokens/s,
// ratio-tokens/s (aipo over PEFT; the target is at least 1.5), aipo- and
// peft-step-MiB and ratio-step-memory (aipo over PEFT; the target is at
// most 1). With -short (make bench-smoke) it runs the 2-layer shape alone,
// one process a side.
func BenchmarkLoRAStepAgainstPEFT(b *testing.B) {
	py := testtools.TorchPython(b)
	// PyTorch as its CPU performance tuning guide runs it, as
	// BenchmarkStepVsPyTorch does: TCMalloc and Intel OpenMP preloaded.
	preload, err := testtools.CPUPreloads(py)
	if err != nil {
		b.Fatal(err)
	}
	threads := runtime.GOMAXPROCS(0)
	shapes, rounds := benchShapes(loraBenchShapes)
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			cfgPath := sh.configFile(b)
			self := []string{os.Args[0], "-test.run", "^TestLoRABenchChild$", "-test.count=1"}
			torch := []string{py, filepath.Join(testtools.RepoRoot(), "scripts", "torch_lora_bench.py"), cfgPath,
				strconv.Itoa(sh.batch), strconv.Itoa(sh.seq), strconv.Itoa(stepBenchSteps), strconv.Itoa(threads),
				strconv.Itoa(loraBenchRank), strconv.Itoa(loraBenchAlpha), strings.Join(loraBenchTargets, ",")}
			var ours, theirs []loraResult
			peft := func() {
				theirs = append(theirs, runLoRAProcess(b, "PEFT", []string{"LD_PRELOAD=" + preload}, torch))
			}
			for r := range rounds {
				// Odd rounds run PEFT first (aipo, PEFT; PEFT, aipo; ...).
				if r%2 == 1 {
					peft()
				}
				ours = append(ours, runLoRAProcess(b, "aipo", []string{loraBenchChildEnv + "=" + sh.name}, self))
				if r%2 == 0 {
					peft()
				}
			}
			if ours[0].Trainable != theirs[0].Trainable {
				b.Fatalf("aipo trains %d adapter parameters, PEFT %d: not the same adapters", ours[0].Trainable, theirs[0].Trainable)
			}
			ra, rt := loraSide(ours).rate(), loraSide(theirs).rate()
			ma, mt := loraStepMemory(ours), loraStepMemory(theirs)
			b.ReportMetric(ra, "aipo-tokens/s")
			b.ReportMetric(rt, "peft-tokens/s")
			b.ReportMetric(ra/rt, "ratio-tokens/s")
			b.ReportMetric(float64(ma)/(1<<20), "aipo-step-MiB")
			b.ReportMetric(float64(mt)/(1<<20), "peft-step-MiB")
			b.ReportMetric(float64(ma)/float64(mt), "ratio-step-memory")
			b.Logf("%s (%.1fM parameters, %.2fM trained, rank %d, %d threads): aipo %.0f tokens/s, step memory %.0f MiB; %s",
				sh.name, float64(ours[0].Params)/1e6, float64(ours[0].Trainable)/1e6, loraBenchRank, threads, ra, float64(ma)/(1<<20), loraSide(ours).spread())
			b.Logf("%s PEFT %s (torch %s, transformers %s, %s; TCMalloc and Intel OpenMP preloaded): %.0f tokens/s, step memory %.0f MiB; %s",
				sh.name, theirs[0].PEFT, theirs[0].Torch, theirs[0].Transformers, theirs[0].Optimizer, rt, float64(mt)/(1<<20), loraSide(theirs).spread())
			b.Logf("%s: aipo has %.2fx PEFT's tokens/s at %.2f of its step memory (net of start-up)", sh.name, ra/rt, float64(ma)/float64(mt))
		})
	}
}

// loraSide is the processes' stepResults, for stepSide's figures.
func loraSide(rs []loraResult) stepSide {
	out := make(stepSide, len(rs))
	for i, r := range rs {
		out[i] = r.stepResult
	}
	return out
}

// loraStepMemory is the largest peak net of start-up over the processes.
func loraStepMemory(rs []loraResult) int64 {
	var m int64
	for _, r := range rs {
		m = max(m, r.peak-r.ReadyRSS)
	}
	return m
}

// runLoRAProcess is runStepProcess for the LoRA sides' JSON line.
func runLoRAProcess(b *testing.B, side string, env, argv []string) loraResult {
	b.Helper()
	r := runStepProcess(b, side, env, argv)
	var lr loraResult
	if err := json.Unmarshal(r.raw, &lr); err != nil {
		b.Fatalf("%s LoRA benchmark printed %q: %v", side, r.raw, err)
	}
	lr.stepResult = r
	if lr.ReadyRSS <= 0 || lr.Trainable <= 0 {
		b.Fatalf("%s LoRA benchmark printed no start-up memory or trained parameters: %s", side, r.raw)
	}
	return lr
}

// TestLoRABenchChild is the aipo side of one BenchmarkLoRAStepAgainstPEFT
// process; it runs only when the benchmark starts it.
func TestLoRABenchChild(t *testing.T) {
	sh, c := benchChildShape(t, loraBenchChildEnv, "BenchmarkLoRAStepAgainstPEFT", loraBenchShapes)
	m, err := model.New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := peft.NewConfig("bench", loraBenchRank, loraBenchAlpha, 0, loraBenchTargets, peft.InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := peft.New(pc, model.AdapterDims(c), rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AttachAdapter(ad, 1); err != nil {
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
	res := loraResult{stepResult: stepResult{Threads: runtime.GOMAXPROCS(0), Params: model.ParamCount(c), Tokens: sh.batch * sh.seq},
		Trainable: ad.Params()}
	if res.ReadyRSS, err = meminfo.Status(0, "VmRSS"); err != nil {
		t.Fatal(err)
	}
	for k := range stepBenchSteps + 1 {
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
