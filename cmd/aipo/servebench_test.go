//go:build vllm

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/benchstat"
	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfmodel"
)

// qwen3Shape06B is config.json of a model shaped as Qwen/Qwen3-0.6B (the
// layer count, widths, heads, vocabulary and tied embedding of that
// model's config.json on the Hugging Face Hub, as its model card lists
// them: 28 layers, 16 query and 8 key/value heads of 128), in float32.
// Its weights are random (hfmodel's seeded values), so what it generates
// is noise, but every matrix multiply has the real model's shape.
const qwen3Shape06B = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "vocab_size": 151936
}`

// Shape of the benchmark's requests: every prompt is promptTokens token
// ids, every answer exactly genTokens tokens.
const (
	promptTokens = 16
	genTokens    = 64
	// benchContext is both servers' context (aipo serve --max-context,
	// vLLM --max-model-len): far above prompt plus output, and small
	// enough that vLLM's 1 GiB KV cache holds 32 sequences of the 0.6B
	// shape (224 KiB a position) with room to spare.
	benchContext = 512
)

// serveLoad is one load: requests requests, concurrent of them in flight
// at a time.
type serveLoad struct {
	name                 string
	concurrent, requests int
	seedBase             int64
}

// serveResult is one server's figures for one load.
type serveResult struct {
	tokPerSec float64
	// peakMiB is the largest PSS sampled during the load; baseMiB the
	// server's PSS after its warm-up request, before any load: what it
	// holds once started (weights, libraries, caches), so that peakMiB -
	// baseMiB is what serving the load added.
	peakMiB, baseMiB float64
}

// serveBenchRounds is how many times each server of a pair is started and
// measured, the two alternated (A B, B A, A B): the CPUs' drift between
// runs (up to 40% seen here) falls on both sides of a round alike.
const serveBenchRounds = 3

// serveSide starts one server on a model directory, runs the loads and
// stops it.
type serveSide struct {
	label string
	run   func(b *testing.B, dir string, loads []serveLoad) []serveResult
}

// servePair is one comparison: aipo serve against vLLM started as label
// says.
type servePair struct {
	name       string
	aipo, vllm serveSide
}

// BenchmarkServeVsVLLM measures aipo serve against vLLM (0.32.0's CPU
// build) on one model directory per size, a tiny Qwen3 and a random model
// of Qwen3-0.6B's shape, each stored in bfloat16 as the Hugging Face
// releases are: the same token-id prompts with the same seeds through
// /v1/completions at temperature 1, each answer exactly 64 tokens with the
// sampled token's log-prob (as a rollout asks), first 16 requests one at a
// time ("batch1"), then 32 at once ("batch32"). It reports generated
// tokens a second over the wall time of each load and the peak
// proportional set size (PSS, shared pages counted once across a server's
// processes) sampled during the load, raw and net of the server's PSS
// after its warm-up.
//
// Two pairs, each run serveBenchRounds times with its two servers
// alternated, one server at a time:
//
//   - the headline, each server at its documented best on these CPUs: aipo
//     serve by default (--dtype auto: bfloat16 for a bfloat16 checkpoint at
//     least 512 wide, the 0.6B shape; float32 for the tiny one) against
//     vLLM as its CPU installation page says (vllmserver.Options.Recommended:
//     --dtype bfloat16, torch.compile on, its thread binding, TCMalloc and
//     Intel OpenMP preloaded, its log checked for all of them);
//   - float32, the tests' settings: aipo serve --dtype float32 against vLLM
//     --dtype float32 --enforce-eager.
//
// It prints, per size, pair and load, the median of the rounds with their
// range (the ratio taken round by round):
//
//	serve-vs-vllm SIZE PAIR LOAD: aipo X [lo-hi] tok/s, vLLM Y [lo-hi] tok/s, ratio R [lo-hi] (3 rounds); PSS aipo A (net a) MiB, vLLM B (net b) MiB
//
// and for batch1, the weight bytes a second each side reads (the
// checkpoint's bytes, all read once a token). With -short (make
// bench-smoke) it serves the tiny model alone, one round, 2 requests one at
// a time, then 8 at once ("batch8"), and leaves out the compiled vLLM,
// whose compilation takes minutes on 2 cores.
func BenchmarkServeVsVLLM(b *testing.B) {
	tokDir := filepath.Dir(shareddata.Path(b, "tokenizers/qwen3/tokenizer.json"))
	vllmserver.Python(b)
	sizes := []struct{ name, config string }{
		{"tiny", hfmodel.TinyQwen3VLLMConfig},
		{"0.6B", qwen3Shape06B},
	}
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			if size.name != "tiny" && testing.Short() {
				b.Skip("the 0.6B shape takes minutes a server on 2 cores; -short runs the tiny model only")
			}
			b.StopTimer()
			dir := filepath.Join(b.TempDir(), "model")
			cfg := strings.Replace(size.config, `"torch_dtype": "float32"`, `"torch_dtype": "bfloat16"`, 1)
			if err := hfmodel.WriteDir(dir, []byte(cfg), 1, checkpoint.BF16, tokDir); err != nil {
				b.Fatal(err)
			}
			weightBytes := dirBytes(b, dir, ".safetensors")
			dtype := defaultDType(b, cfg)
			// The weights aipo's default reads a token: the checkpoint's
			// bfloat16 bytes, twice them when it decodes in float32.
			aipoBytes := weightBytes
			if dtype == inproc.DTypeF32 {
				aipoBytes *= 2
			}
			// The 0.6B shape's tensors are garbage now; give the memory
			// back before the servers need it.
			runtime.GC()
			debug.FreeOSMemory()
			loads := []serveLoad{
				{name: "batch1", concurrent: 1, requests: 16, seedBase: 1000},
				{name: "batch32", concurrent: 32, requests: 32, seedBase: 2000},
			}
			rounds := serveBenchRounds
			if testing.Short() {
				// make bench-smoke: both servers and both paths, at the
				// fewest requests that exercise them.
				loads = []serveLoad{
					{name: "batch1", concurrent: 1, requests: 2, seedBase: 1000},
					{name: "batch8", concurrent: 8, requests: 8, seedBase: 2000},
				}
				rounds = 1
			}
			pairs := []servePair{
				{name: "default",
					aipo: serveSide{"aipo default (" + dtype + ")", func(b *testing.B, dir string, l []serveLoad) []serveResult { return benchAipoServe(b, dir, l) }},
					vllm: serveSide{"vLLM bfloat16 compiled, preloads", func(b *testing.B, dir string, l []serveLoad) []serveResult { return benchVLLM(b, dir, l, true) }}},
				{name: "float32",
					aipo: serveSide{"aipo float32", func(b *testing.B, dir string, l []serveLoad) []serveResult {
						return benchAipoServe(b, dir, l, "--dtype", "float32")
					}},
					vllm: serveSide{"vLLM float32 eager", func(b *testing.B, dir string, l []serveLoad) []serveResult { return benchVLLM(b, dir, l, false) }}},
			}
			for _, pr := range pairs {
				if testing.Short() && pr.name == "default" {
					fmt.Printf("serve-vs-vllm %s default: vLLM's compiled bfloat16 left out under -short\n", size.name)
					res := pr.aipo.run(b, dir, loads)
					for i, l := range loads {
						fmt.Printf("serve-vs-vllm %s default %s: %s %.1f tok/s, PSS %.0f (net %.0f) MiB\n", size.name, l.name, pr.aipo.label, res[i].tokPerSec, res[i].peakMiB, res[i].peakMiB-res[i].baseMiB)
					}
					continue
				}
				// byRound[side][round][load]
				var byRound [2][][]serveResult
				for r := range rounds {
					order := []int{0, 1}
					if r%2 == 1 {
						order = []int{1, 0}
					}
					for _, side := range order {
						s := pr.aipo
						if side == 1 {
							s = pr.vllm
						}
						b.Logf("%s %s round %d: %s", size.name, pr.name, r+1, s.label)
						byRound[side] = append(byRound[side], s.run(b, dir, loads))
					}
				}
				for i, l := range loads {
					var tok, peak, net [2][]float64
					for side := range 2 {
						for _, res := range byRound[side] {
							tok[side] = append(tok[side], res[i].tokPerSec)
							peak[side] = append(peak[side], res[i].peakMiB)
							net[side] = append(net[side], res[i].peakMiB-res[i].baseMiB)
						}
					}
					ratio := benchstat.Of(benchstat.Ratios(tok[0], tok[1]))
					fmt.Printf("serve-vs-vllm %s %s %s: %s %s tok/s, %s %s tok/s, ratio %s (%d rounds, alternated); PSS %s %s (net %s) MiB, %s %s (net %s) MiB\n",
						size.name, pr.name, l.name,
						pr.aipo.label, benchstat.Of(tok[0]).Format("%.1f"), pr.vllm.label, benchstat.Of(tok[1]).Format("%.1f"), ratio.Format("%.2f"), rounds,
						"aipo", benchstat.Of(peak[0]).Format("%.0f"), benchstat.Of(net[0]).Format("%.0f"),
						"vLLM", benchstat.Of(peak[1]).Format("%.0f"), benchstat.Of(net[1]).Format("%.0f"))
					if l.concurrent == 1 && pr.name == "default" {
						// One stream decodes one token at a time, each reading
						// every weight once: the bytes of the weights as each
						// server holds them times tokens a second is the memory
						// bandwidth the decode reaches on weights.
						fmt.Printf("serve-vs-vllm %s %s %s weights read: aipo %.2f GB/s (%.0f MB of %s weights a token), vLLM %.2f GB/s (%.0f MB of bfloat16 weights a token)\n",
							size.name, pr.name, l.name, float64(aipoBytes)*benchstat.Median(tok[0])/1e9, float64(aipoBytes)/1e6, dtype, float64(weightBytes)*benchstat.Median(tok[1])/1e9, float64(weightBytes)/1e6)
					}
					b.ReportMetric(ratio.Median, "aipo/vllm_"+pr.name+"_"+l.name)
				}
			}
		})
	}
}

// dirBytes is the size of the files in dir whose names end in suffix.
func dirBytes(b *testing.B, dir, suffix string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			fi, err := e.Info()
			if err != nil {
				b.Fatal(err)
			}
			n += fi.Size()
		}
	}
	return n
}

// defaultDType is what aipo serve's --dtype auto picks on this CPU for a
// bfloat16 directory of the model config cfg describes
// (inproc.ResolveDType, the rule the server applies).
func defaultDType(b *testing.B, cfg string) string {
	b.Helper()
	var c struct {
		Hidden int `json:"hidden_size"`
	}
	if err := json.Unmarshal([]byte(cfg), &c); err != nil || c.Hidden <= 0 {
		b.Fatalf("the model config has no hidden_size (%v)", err)
	}
	d, err := inproc.ResolveDType(inproc.DTypeAuto, checkpoint.BF16, c.Hidden)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// benchAipoServe runs aipo serve on dir, with flags after the bench's
// own, in a child process (so that its peak RSS is its own), warms it up,
// runs each load b.N times and stops it.
func benchAipoServe(b *testing.B, dir string, loads []serveLoad, flags ...string) []serveResult {
	addr := freeAddr(b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	args := append([]string{"serve", "--checkpoint", dir, "--name", "policy",
		"--http", addr, "--grpc=", "--max-context", strconv.Itoa(benchContext), "--grace", "5s"}, flags...)
	cmd, out := aipoCommand(ctx, b, nil, args...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	defer stop()
	url := "http://" + addr
	hc := benchHTTPClient()
	defer hc.CloseIdleConnections()
	// aipo serve listens once the weights are loaded: /health answers 200
	// from then on.
	began := time.Now()
	for {
		select {
		case <-done:
			b.Fatalf("aipo serve exited before it answered /health (%v); its output:\n%s", cmd.ProcessState, out.String())
		default:
		}
		if resp, err := hc.Get(url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(began) > 5*time.Minute {
			stop()
			b.Fatalf("aipo serve did not answer /health with 200 within 5m; its output:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Logf("aipo serve (pid %d) serves %s after %s", cmd.Process.Pid, filepath.Base(dir), time.Since(began).Round(time.Millisecond))
	pid := cmd.Process.Pid
	post := func(ctx context.Context, body map[string]any) (completionAnswer, error) {
		return postCompletion(ctx, hc, url, body)
	}
	return runLoads(b, "aipo serve", post, nil, func() []int { return []int{pid} }, loads)
}

// benchVLLM runs vLLM on dir, warms it up, runs each load b.N times and
// stops it.
func benchVLLM(b *testing.B, dir string, loads []serveLoad, recommended bool) []serveResult {
	vs := vllmserver.Start(b, dir, vllmserver.Options{Name: "policy", MaxModelLen: benchContext, Recommended: recommended})
	defer vs.Stop()
	hc := benchHTTPClient()
	defer hc.CloseIdleConnections()
	pgid := vs.PID()
	// vLLM is an API server process with its engine in a child process
	// (and helpers of Python's multiprocessing), all in the process group
	// vllmserver starts: the PSS of the group's members, summed, counts
	// the libraries they share once.
	pids := func() []int { return groupPIDs(pgid) }
	post := func(ctx context.Context, body map[string]any) (completionAnswer, error) {
		a, err := postCompletion(ctx, hc, vs.URL, body)
		if err != nil {
			err = fmt.Errorf("%w; vLLM's log:\n%s", err, vs.Tail(30))
		}
		return a, err
	}
	// vLLM honours ignore_eos; aipo serve has no such parameter (see
	// runLoads).
	extra := map[string]any{"ignore_eos": true}
	return runLoads(b, "vLLM", post, extra, pids, loads)
}

// runLoads warms a server up with one short request, then runs each load
// b.N times, timing it, with the PSS of the server's processes (pids)
// sampled through the load (samplePSS); its peak is the load's. extra are the fields only
// this server gets.
//
// Every answer must hold exactly genTokens tokens (finish_reason
// "length"). vLLM is told to ignore end-of-sequence tokens; aipo serve
// has no ignore_eos or min_tokens (serve reads neither), so its
// answers could end early on one of the Qwen3 tokenizer's end tokens.
// With the random weights and these fixed seeds none does; should a
// change to the model or the sampler make one do so, the benchmark fails
// naming the request rather than count tokens that were not generated.
func runLoads(b *testing.B, server string, post func(context.Context, map[string]any) (completionAnswer, error),
	extra map[string]any, pids func() []int, loads []serveLoad) []serveResult {
	body := func(prompt []int32, seed int64, maxTokens int) map[string]any {
		m := map[string]any{"model": "policy", "prompt": prompt, "max_tokens": maxTokens, "temperature": 1, "seed": seed,
			"logprobs": 1, "return_token_ids": true, "skip_special_tokens": false}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	if _, err := post(ctx, body(benchPrompt(-1), 1, 4)); err != nil {
		cancel()
		b.Fatalf("%s: warm-up request: %v", server, err)
	}
	cancel()
	var base int64
	for _, pid := range pids() {
		if n, err := meminfo.PSS(pid); err == nil {
			base += n
		}
	}
	out := make([]serveResult, len(loads))
	for li, l := range loads {
		var wall time.Duration
		stopSampling := samplePSS(pids)
		for range b.N {
			// Bounds the whole load: the 0.6B shape's 32 requests take
			// minutes on 2 cores.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			jobs := make(chan int, l.requests)
			for i := range l.requests {
				jobs <- i
			}
			close(jobs)
			errs := make(chan error, l.requests)
			var wg sync.WaitGroup
			b.StartTimer()
			began := time.Now()
			for range l.concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range jobs {
						seed := l.seedBase + int64(i)
						a, err := post(ctx, body(benchPrompt(i), seed, genTokens))
						if err == nil {
							err = a.check(genTokens)
						}
						if err != nil {
							errs <- fmt.Errorf("%s %s request %d (seed %d): %w", server, l.name, i, seed, err)
							cancel()
							return
						}
					}
				}()
			}
			wg.Wait()
			wall += time.Since(began)
			b.StopTimer()
			cancel()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		out[li] = serveResult{tokPerSec: float64(b.N*l.requests*genTokens) / wall.Seconds(), peakMiB: float64(stopSampling()) / (1 << 20), baseMiB: float64(base) / (1 << 20)}
		b.Logf("%s %s: %d requests of %d tokens, %d at a time, in %s", server, l.name, l.requests, genTokens, l.concurrent, wall.Round(time.Millisecond))
	}
	return out
}

// benchPrompt is request i's prompt: promptTokens ordinary token ids (below
// the Qwen3 vocabulary's special tokens at 151643), a function of i only
// so that both servers get the same prompts. No two prompts share a first
// token, so vLLM's prefix cache finds nothing to reuse. i = -1 is the
// warm-up's.
func benchPrompt(i int) []int32 {
	p := make([]int32, promptTokens)
	for j := range p {
		p[j] = int32((int64(i+2)*7919 + int64(j)*104729) % 150000)
	}
	return p
}

// check requires one choice of exactly n tokens, each with its log-prob,
// that ended for length.
func (a completionAnswer) check(n int) error {
	if len(a.Choices) != 1 {
		return fmt.Errorf("%d choices, want 1", len(a.Choices))
	}
	c := a.Choices[0]
	fr := "<none>"
	if c.FinishReason != nil {
		fr = *c.FinishReason
	}
	if len(c.TokenIDs) != n || fr != "length" {
		return fmt.Errorf("%d token ids (finish_reason %s), want exactly %d ending for length", len(c.TokenIDs), fr, n)
	}
	if c.Logprobs == nil || len(c.Logprobs.TokenLogprobs) != n {
		return fmt.Errorf("the answer has no log-prob for each of its %d tokens", n)
	}
	if a.Usage != nil && a.Usage.CompletionTokens != n {
		return fmt.Errorf("usage.completion_tokens %d, want %d", a.Usage.CompletionTokens, n)
	}
	return nil
}

// benchHTTPClient keeps a connection open per concurrent request, so that
// the loads time generation rather than connection setup.
func benchHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// groupPIDs lists the live processes of process group pgid.
func groupPIDs(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and
		// parentheses, so fields are counted after its last ')'.
		k := bytes.LastIndexByte(stat, ')')
		if k < 0 {
			continue
		}
		if f := strings.Fields(string(stat[k+1:])); len(f) >= 3 && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// samplePSS sums the PSS of pids() until the returned stop, which gives
// the largest sum seen, in bytes. Reading a process's PSS
// (/proc/PID/smaps_rollup) walks its page tables in the kernel: for
// vLLM's processes (several GB mapped) one reading takes about a tenth of
// a second of CPU, so sampling every 100 ms kept one of the machine's two
// cores busy beside the server it measured (seen with perf: the sampler
// at 100% CPU in smaps_account while vLLM decoded). The sampler now waits
// at least pssSamplerIdle times as long as its last reading took (and at
// least 100 ms) before the next, so that it takes at most 1/(1 +
// pssSamplerIdle) of one core, whichever server it reads.
func samplePSS(pids func() []int) (stop func() int64) {
	var peak atomic.Int64
	sample := func() time.Duration {
		began := time.Now()
		var sum int64
		for _, pid := range pids() {
			if n, err := meminfo.PSS(pid); err == nil {
				sum += n
			}
		}
		if sum > peak.Load() {
			peak.Store(sum)
		}
		return time.Since(began)
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			took := sample()
			select {
			case <-done:
				return
			case <-time.After(max(100*time.Millisecond, pssSamplerIdle*took)):
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		sample()
		return peak.Load()
	}
}

// pssSamplerIdle is how many times its last reading's duration the PSS
// sampler waits before the next: it takes at most 1/20 of a core.
const pssSamplerIdle = 19
