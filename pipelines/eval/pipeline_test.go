package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
	_ "github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

// randomCheckpoint saves an untrained two-layer model over the built-in
// vocabulary as a committed checkpoint of policy version 7.
func randomCheckpoint(t testing.TB) string {
	t.Helper()
	m, err := model.New(model.Config{ModelType: "qwen2", HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 2048,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}, 11)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m.Config())
	cc, err := checkpoint.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	var ts []checkpoint.Tensor
	for _, p := range m.Params() {
		ts = append(ts, checkpoint.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Data})
	}
	tj, _ := tokenizer.Builtin().Marshal()
	tc, _ := tokenizer.Builtin().MarshalConfig()
	dir := filepath.Join(t.TempDir(), "step-000007")
	ck := checkpoint.Checkpoint{Config: cc, Tensors: ts, Tokenizer: map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": tc},
		Optimizer: []byte("{}"), Trainer: checkpoint.TrainerState{Step: 7, PolicyVersion: 7, RunID: "eval-test"}}
	if err := checkpoint.Save(context.Background(), dir, ck); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readAll reads every committed chunk under out.
func readAll(t *testing.T, out string) []schemas.EvalRecord {
	t.Helper()
	mans, _ := filepath.Glob(filepath.Join(out, "records", "*", "chunk-*", rundir.ManifestName))
	var all []schemas.EvalRecord
	for _, m := range mans {
		rows, _, err := schemas.ReadStep[schemas.EvalRecord](context.Background(), filepath.Dir(m))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rows...)
	}
	return all
}

// TestEvalPipelineResumes runs a small evaluation of a random model through
// the Beam pipeline on prism, stopping after two chunks, then resumes it;
// the records must cover every (problem, sample) exactly once and the
// report must be well formed.
func TestEvalPipelineResumes(t *testing.T) {
	ck := randomCheckpoint(t)
	out := t.TempDir()
	yml := fmt.Sprintf(`
run: smoke
out: %s
data_dir: %s
policy: {uri: "inproc://%s?max_batch=16", label: random-init}
sampling: {samples: 2, max_tokens: 6, seed: 3}
pass_k: [1, 2]
maj_k: [2]
chunk_size: 2
max_chunks: 2
benchmarks:
  - {preset: gsm8k, limit: 5}
  - {preset: math500, limit: 2}
  - {preset: mbpp_sanitized, limit: 3}
`, out, testtools.BenchmarkData(), ck)
	cfg, err := evalconfig.Parse([]byte(yml), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep, plan, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// gsm8k: 3 chunks, math500: 1, mbpp_sanitized: 2.
	if plan.Todo != 2 || plan.Left != 4 || plan.Committed != 0 {
		t.Fatalf("first run plan: todo %d, left %d, committed %d; want 2, 4, 0", plan.Todo, plan.Left, plan.Committed)
	}
	if rep.Complete {
		t.Errorf("report of a partial run says complete")
	}
	if got := len(readAll(t, out)); got != 8 {
		t.Fatalf("after two chunks of 2 problems x 2 samples: %d records, want 8", got)
	}
	// A killed attempt leaves a partial shard in a chunk that is not
	// committed; the resumed run must neither read nor keep it.
	stray := filepath.Join(ChunkDir(out, "mbpp_sanitized", 1), rundir.ShardsName, ".tmp-killed.parquet")
	if err := os.MkdirAll(filepath.Dir(stray), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stray, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The partial run wrote its report; the resumed run must write it
	// again, so the checks below cannot pass on the first one's.
	reports := []string{filepath.Join(out, ReportJSON), filepath.Join(out, ReportMarkdown), filepath.Join(out, ReportPNG)}
	testtools.Stamp(t, reports...)
	cfg.MaxChunks = 0
	rep, plan, err = Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testtools.CheckRewritten(t, reports...)
	if plan.Todo != 4 || plan.Committed != 2 || plan.Left != 0 {
		t.Fatalf("resumed plan: todo %d, committed %d, left %d; want 4, 2, 0", plan.Todo, plan.Committed, plan.Left)
	}
	if _, err := os.Stat(stray); err == nil {
		t.Errorf("the partial shard %s of the killed attempt is still there", stray)
	}
	recs := readAll(t, out)
	if len(recs) != (5+2+3)*2 {
		t.Fatalf("%d records after resuming, want %d", len(recs), (5+2+3)*2)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		k := fmt.Sprintf("%s|%s|%d", r.Benchmark, r.ProblemID, r.SampleIndex)
		if seen[k] {
			t.Errorf("duplicate record %s", k)
		}
		seen[k] = true
		if r.Run != "smoke" || r.Checkpoint != "random-init" || r.PolicyVersion != 7 || r.ResponseLen < 1 || r.ResponseLen > 6 ||
			r.Prompt == "" || r.Answer == "" || r.Verdict == "" || r.FinishReason == "" {
			t.Errorf("record %s is not well formed: %+v", k, r)
		}
		if r.Benchmark == "gsm8k" && !strings.Contains(r.Prompt, "\\boxed{}") {
			t.Errorf("gsm8k prompt lacks the \\boxed{} instruction: %q", r.Prompt)
		}
	}
	// Same seed, same problem, same sample: the resumed chunks drew what a
	// single run would have; the two samples of a problem differ in seed.
	if !rep.Complete {
		t.Errorf("report after resuming says incomplete")
	}
	if len(rep.Benchmarks) != 3 || rep.Benchmarks[0].Scored != 5 || rep.Benchmarks[1].Scored != 2 || rep.Benchmarks[2].Scored != 3 {
		t.Fatalf("report benchmarks: %+v", rep.Benchmarks)
	}
	for _, b := range rep.Benchmarks {
		if b.MaxN != 2 || len(b.Pass) != 2 || b.Avg.N != b.Scored {
			t.Errorf("%s: n %d, pass %+v, avg %+v", b.Name, b.MaxN, b.Pass, b.Avg)
		}
		if b.Code != (b.Name == "mbpp_sanitized") {
			t.Errorf("%s: code = %v", b.Name, b.Code)
		}
	}
	if len(rep.Benchmarks[1].Subsets) == 0 {
		t.Errorf("math500 report has no subject/level breakdown")
	}
	md, err := os.ReadFile(filepath.Join(out, ReportMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| Model | gsm8k (Avg@2) | math500 (Avg@2) | mbpp_sanitized (Avg@2) | Avg. |", "| random-init |", "Pass@2", "maj@2", "math500 by subset"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	pngBytes, err := os.ReadFile(filepath.Join(out, ReportPNG))
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(pngBytes)); err != nil || img.Bounds().Dx() < 100 {
		t.Errorf("report.png does not decode as a chart: %v", err)
	}
	back, err := ReadReport(ctx, filepath.Join(out, ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if back.Overall != rep.Overall || len(back.Benchmarks) != 3 {
		t.Errorf("report.json round trip: %+v vs %+v", back.Overall, rep.Overall)
	}
	// A third run finds everything committed and runs no pipeline.
	_, plan, err = Run(ctx, cfg)
	if err != nil || plan.Todo != 0 || plan.Committed != 6 {
		t.Fatalf("third run: err %v, plan %+v; want nothing to do", err, plan)
	}
	// Other settings on the same directory are refused.
	cfg.Sampling.Temperature = 0.5
	if _, _, err := Run(ctx, cfg); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("a run with another temperature over the same out: err %v, want a refusal naming other settings", err)
	}
}
