package eval

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/metrics"
)

// TestGreedyResponses evaluates a random model with sampling.greedy twice,
// with two seeds: each problem gets its greedy response (sample index -1)
// besides its samples, the greedy responses are the same under both seeds
// while the samples are not (so the greedy request was decoded at
// temperature 0), and the report scores the greedy responses apart from
// the samples.
func TestGreedyResponses(t *testing.T) {
	ck := randomCheckpoint(t)
	greedy := map[int]map[string]string{}
	sampled := map[int]map[string]string{}
	for _, seed := range []int{3, 4} {
		out := t.TempDir()
		cfg, err := evalconfig.Parse([]byte(fmt.Sprintf(`
out: %s
data_dir: %s
policy: {uri: "inproc://%s?max_batch=16", label: random-init}
sampling: {samples: 2, max_tokens: 6, seed: %d, greedy: true}
pass_k: [1, 2]
chunk_size: 2
benchmarks: [{preset: gsm8k, limit: 3}]
`, out, testtools.BenchmarkData(), ck, seed)), "test")
		if err != nil {
			t.Fatal(err)
		}
		rep, _, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		recs := readAll(t, out)
		if len(recs) != 3*3 {
			t.Fatalf("seed %d: %d records, want 3 problems x (1 greedy + 2 samples)", seed, len(recs))
		}
		greedy[seed], sampled[seed] = map[string]string{}, map[string]string{}
		for _, r := range recs {
			key := fmt.Sprintf("%s/%d", r.ProblemID, r.SampleIndex)
			switch {
			case r.SampleIndex == GreedySample:
				greedy[seed][r.ProblemID] = r.Response
			case r.SampleIndex == 0 || r.SampleIndex == 1:
				sampled[seed][key] = r.Response
			default:
				t.Errorf("seed %d: record %s has sample index %d", seed, r.ProblemID, r.SampleIndex)
			}
		}
		if len(greedy[seed]) != 3 || len(sampled[seed]) != 6 {
			t.Fatalf("seed %d: %d greedy responses and %d samples, want 3 and 6", seed, len(greedy[seed]), len(sampled[seed]))
		}
		b := rep.Benchmarks[0]
		if b.Greedy == nil || b.Greedy.N != 3 || b.Avg.N != 3 || b.MaxN != 2 || b.Samples != 6 || b.Scored != 3 {
			t.Errorf("seed %d: report %+v (greedy %+v), want the greedy responses of 3 problems apart from their 2 samples each", seed, b, b.Greedy)
		}
		md, err := os.ReadFile(filepath.Join(out, ReportMarkdown))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(md), "## Greedy decoding and collaborator calls") || !strings.Contains(string(md), "one greedy response per problem") {
			t.Errorf("seed %d: report.md does not show the greedy responses:\n%s", seed, md)
		}
	}
	for id, g := range greedy[3] {
		if greedy[4][id] != g {
			t.Errorf("problem %s: greedy response %q under seed 3, %q under seed 4; want the same", id, g, greedy[4][id])
		}
	}
	same := 0
	for k, s := range sampled[3] {
		if sampled[4][k] == s {
			same++
		}
	}
	if same == len(sampled[3]) {
		t.Errorf("every sample is the same under seeds 3 and 4: %v; the check of the greedy responses shows nothing", sampled[3])
	}
}

// TestScoreGreedyAndCalls scores records by hand: the greedy responses
// give the greedy accuracy and their call rate, the samples Avg@n,
// Pass@n and theirs; a greedy response counts in none of the samples'.
func TestScoreGreedyAndCalls(t *testing.T) {
	rec := func(problem string, s int, correct bool, response string) schemas.EvalRecord {
		return schemas.EvalRecord{ProblemID: problem, SampleIndex: int32(s), Correct: correct, Response: response, ResponseLen: 4}
	}
	recs := []schemas.EvalRecord{
		rec("a", GreedySample, true, "<retrieval>lugr</retrieval><result>450</result>450+3=453;"),
		rec("a", 0, true, "<result>450</result>450+3=453;"),
		rec("a", 1, false, "<verify>450+3=454</verify>"),
		rec("b", GreedySample, false, "<result>1</result>1+1=2;"),
		rec("b", 0, false, "7;"),
		rec("b", 1, false, "8;"),
	}
	pb := PlannedBenchmark{Name: "unseen", Verifier: "integer", Problems: 2, resolved: evalconfig.Resolved{Verifier: "integer"}}
	b := scoreBenchmark(pb, recs, []int{2}, nil)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-12 }
	pass, _ := metrics.Find(b.Pass, 2)
	if b.Greedy == nil || !near(b.Greedy.Mean, 0.5) || b.Greedy.N != 2 || !near(b.GreedyCallRate, 0.5) || !near(b.CallRate, 0.25) ||
		!near(b.Avg.Mean, 0.25) || b.MaxN != 2 || b.Samples != 4 || !near(pass.Mean, 0.5) || b.Scored != 2 {
		t.Errorf("score %+v (greedy %+v), want greedy 0.5 with call rate 0.5, Avg@2 0.25, Pass@2 0.5, samples' call rate 0.25", b, b.Greedy)
	}
	if b := scoreBenchmark(pb, recs[1:3], []int{2}, nil); b.Greedy != nil || b.GreedyCallRate != 0 {
		t.Errorf("without greedy responses: greedy %+v, call rate %v; want none", b.Greedy, b.GreedyCallRate)
	}
}
