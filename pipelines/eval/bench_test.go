package eval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/sandbox"
)

// BenchmarkScoring measures the cost of scoring by benchmark, without the
// model: reference responses of MATH500 and GSM8K through the math
// verifier, and of 32 MBPP (sanitized) and HumanEval problems through the
// sandbox (GOMAXPROCS programs at once), in records per second, with the
// ratio of math to code throughput from the same run. It reads the copies
// bundled in the binary (data/benchmarks). With -short (make bench-smoke)
// the code benchmarks run 4 problems each.
func BenchmarkScoring(b *testing.B) {
	sb, err := sandbox.New(sandbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	codeProblems := 32
	if testing.Short() {
		codeProblems = 4
	}
	rate := map[string]float64{}
	for _, name := range []string{"math500", "gsm8k", "mbpp_sanitized", "humaneval"} {
		r, err := evalconfig.Config{}.WithDefaults().Resolve(evalconfig.Benchmark{Preset: name})
		if err != nil {
			b.Fatal(err)
		}
		ps, dead, err := load(context.Background(), r)
		if err != nil || len(dead) > 0 {
			b.Fatalf("%s: %v, %d rows dead-lettered", name, err, len(dead))
		}
		if r.Code() && len(ps) > codeProblems {
			ps = ps[:codeProblems]
		}
		sc, err := newScorer(r.Verifier, sb)
		if err != nil {
			b.Fatal(err)
		}
		resp := make([]string, len(ps))
		for i, p := range ps {
			resp[i], _ = ReferenceResponse(r.Verifier, p)
		}
		start := time.Now()
		n := 0
		for range b.N {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i, p := range ps {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if v, err := sc.score(context.Background(), p, resp[i]); err != nil || !v.Correct {
						b.Errorf("%s %s: %v %s", name, p.ID, err, v.Reason)
					}
				}()
			}
			wg.Wait()
			n += len(ps)
		}
		rate[name] = float64(n) / time.Since(start).Seconds()
		b.ReportMetric(rate[name], name+"-records/s")
	}
	b.ReportMetric(rate["math500"]/rate["mbpp_sanitized"], "math500/mbpp-speed")
}

// BenchmarkPipelineOverhead measures what running the chunks through the
// Beam pipeline on prism costs over calling the chunk DoFn directly: the
// same chunks (48 GSM8K problems, 4 samples of at most 16 tokens each, 8
// problems a chunk) of a random two-layer model served in this process,
// once by Run and once by evalChunkFn.ProcessElement on every chunk at
// once, into fresh directories each iteration. It reports both in
// records per second and their ratio, pipeline seconds over direct
// seconds: the runner's start-up and bookkeeping and no more (1.3 to 1.4
// on 2 shared cores of an AMD EPYC). A runner that takes CPU from the
// engine while a chunk samples shows as a large ratio: 11 to 33 there
// when prism's progress loop spun on a sink's bundle. With -short (make
// bench-smoke) it evaluates 16 problems.
func BenchmarkPipelineOverhead(b *testing.B) {
	ck := randomCheckpoint(b)
	ctx := context.Background()
	problems := 48
	if testing.Short() {
		problems = 16
	}
	config := func(out string) evalconfig.Config {
		yml := fmt.Sprintf(`
run: bench
out: %s
data_dir: %s
policy: {uri: "inproc://%s?max_batch=256", label: random-init}
sampling: {samples: 4, max_tokens: 16, seed: 5}
pass_k: [1, 4]
maj_k: [4]
chunk_size: 8
benchmarks:
  - {preset: gsm8k, limit: %d}
`, out, testtools.BenchmarkData(), ck, problems)
		cfg, err := evalconfig.Parse([]byte(yml), "bench")
		if err != nil {
			b.Fatal(err)
		}
		return cfg
	}
	// evalDirect evaluates every chunk at once with the chunk DoFn
	// itself, as the pipeline's bundles would, but without Beam.
	evalDirect := func() time.Duration {
		cfg, plan, todo, err := prepare(ctx, config(b.TempDir()))
		if err != nil {
			b.Fatal(err)
		}
		fn := newChunkFn(cfg, plan)
		if err := fn.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		defer fn.Teardown()
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(todo))
		for i, c := range todo {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = fn.ProcessElement(ctx, c)
			}()
		}
		wg.Wait()
		took := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		return took
	}
	// One client holds the checkpoint's engine for the whole benchmark,
	// so that both ways share it, loaded once.
	hold, err := policy.Open(ctx, "inproc://"+ck+"?max_batch=256")
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Close()
	evalDirect() // warms the engine up, untimed
	records := problems * 4
	var pipe, direct time.Duration
	for range b.N {
		direct += evalDirect()
		start := time.Now()
		if _, _, err := Run(ctx, config(b.TempDir())); err != nil {
			b.Fatal(err)
		}
		pipe += time.Since(start)
	}
	b.ReportMetric(float64(records*b.N)/pipe.Seconds(), "pipeline-records/s")
	b.ReportMetric(float64(records*b.N)/direct.Seconds(), "direct-records/s")
	b.ReportMetric(pipe.Seconds()/direct.Seconds(), "pipeline/direct")
}
