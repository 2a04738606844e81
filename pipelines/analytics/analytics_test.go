package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, "prism") }

// call is one interaction of a hand-built trajectory.
type call struct {
	agent, status string
	latency       float32
	noisy         bool
}

func traj(step int64, prompt string, sample int32, correct bool, reward float32, finish string, sources []int8, calls ...call) schemas.Trajectory {
	t := schemas.Trajectory{
		SchemaVersion: schemas.SchemaVersion, Run: "toy", Step: step, PolicyVersion: step - 1,
		PromptID: prompt, SampleIndex: sample, DataSource: "toy",
		PromptIDs: []int32{1, 2, 3}, TokenSource: sources,
		Reward: reward, Correct: correct, FinishReason: finish,
	}
	// Spans: the i-th call covers the i-th run of external tokens, or an
	// empty span after the previous one when there are fewer runs.
	var runs [][2]int32
	for i, src := range sources {
		t.ResponseIDs = append(t.ResponseIDs, int32(100+i))
		lp := float32(0)
		if src == schemas.SourcePolicy {
			lp = -0.5
		} else if i == 0 || sources[i-1] == schemas.SourcePolicy {
			runs = append(runs, [2]int32{int32(i), int32(i + 1)})
		} else {
			runs[len(runs)-1][1] = int32(i + 1)
		}
		t.BehaviorLogProbs = append(t.BehaviorLogProbs, lp)
	}
	end := int32(0)
	for i, c := range calls {
		span := [2]int32{end, end}
		if i < len(runs) {
			span = runs[i]
		}
		end = span[1]
		t.InteractionAgent = append(t.InteractionAgent, c.agent)
		t.InteractionQuery = append(t.InteractionQuery, "q")
		t.InteractionResult = append(t.InteractionResult, "r")
		t.InteractionStatus = append(t.InteractionStatus, c.status)
		t.InteractionLatencyMs = append(t.InteractionLatencyMs, c.latency)
		t.InteractionSpanStart = append(t.InteractionSpanStart, span[0])
		t.InteractionSpanEnd = append(t.InteractionSpanEnd, span[1])
		t.InteractionNoisy = append(t.InteractionNoisy, c.noisy)
	}
	if err := t.Validate(); err != nil {
		panic(fmt.Sprintf("test trajectory %s/%d is invalid: %v", prompt, sample, err))
	}
	return t
}

// writeStep writes each group of rows as one shard of step k and commits
// the step unless commit is false.
func writeStep(t *testing.T, run string, k int64, commit bool, shards ...[]schemas.Trajectory) {
	t.Helper()
	ctx := context.Background()
	dir := schemas.StepDir(run, k)
	m := schemas.Manifest{Kind: "trajectories", Run: "toy", Step: k, PolicyVersion: k - 1}
	for i, rows := range shards {
		f, err := schemas.WriteShard(ctx, storage.Join(dir, "shards", "part-"+string(rune('0'+i))+".parquet"), rows)
		if err != nil {
			t.Fatal(err)
		}
		f.Path = "shards/" + f.Path
		m.Files = append(m.Files, f)
	}
	if !commit {
		return
	}
	if err := schemas.CommitManifest(ctx, dir, m); err != nil {
		t.Fatal(err)
	}
}

const (
	P, V, K, R, T = schemas.SourcePolicy, schemas.SourceVerify, schemas.SourceKnowledge, schemas.SourceReason, schemas.SourceTemplate
)

// buildRun writes the toy run:
//   - step 1: prompts p1 (one right, one wrong) and p2 (both wrong), in two
//     shards, with verify, knowledge, reason and refused calls;
//   - step 2: prompt p3, both samples right, no calls;
//   - step 3: a shard but no manifest (a killed writer): skipped;
//   - step 5: committed with no rows.
func buildRun(t *testing.T, run string) {
	writeStep(t, run, 1, true,
		[]schemas.Trajectory{
			traj(1, "p1", 0, true, 1, "eos", []int8{P, P, V, V, T, P}, call{"verify", "ok", 100, false}),
			traj(1, "p1", 1, false, 0, "length", []int8{P, P, P, P}),
		},
		[]schemas.Trajectory{
			traj(1, "p2", 0, false, 0, "eos", []int8{P, K, K, K, T, T, P, R, R, P},
				call{"knowledge", "ok", 200, true}, call{"reason", "error", 300, false}),
			traj(1, "p2", 1, false, 0, "eos", []int8{P, P},
				call{"knowledge", "ok", 50, false}, call{"verify", "limit", 0, false}),
		})
	writeStep(t, run, 2, true, []schemas.Trajectory{
		traj(2, "p3", 0, true, 1, "eos", []int8{P, P, P}),
		traj(2, "p3", 1, true, 0.5, "stop", []int8{P, P, P, P, P}),
	})
	writeStep(t, run, 3, false, []schemas.Trajectory{traj(3, "p4", 0, true, 1, "eos", []int8{P})})
	writeStep(t, run, 5, true)
}

// want holds the metrics of the toy run, computed by hand.
var want = []StepMetrics{
	{
		Step: 1, PolicyVersion: 0, Trajectories: 4, Prompts: 2,
		Accuracy: 0.25, FailedTasks: 0.5, SolvedAllTasks: 0, MeanReward: 0.25,
		// calls: verify 2 (one refused at the limit), knowledge 2, reason 1.
		InteractionsPerTrajectory: AgentCounts{Verify: 0.5, Knowledge: 0.5, Reason: 0.25, Total: 1.25},
		Interactions:              5,
		// tokens 6+4+10+2 = 22: verify 2, knowledge 3, reason 2, template 3.
		ResponseTokens: 22, ExternalTokenShare: 7.0 / 22,
		ExternalTokenShareByAgent: AgentCounts{Verify: 2.0 / 22, Knowledge: 3.0 / 22, Reason: 2.0 / 22, Total: 7.0 / 22},
		TemplateTokenShare:        3.0 / 22,
		// lengths sorted 2 4 6 10: rank ceil(2)=2 -> 4, rank ceil(3.8)=4 -> 10.
		ResponseLengthP50: 4, ResponseLengthP95: 10,
		// calls made (not limit): latencies 50 100 200 300; one error.
		CollaboratorCalls: 4, LatencyMsP50: 100, LatencyMsP95: 300, ErrorRate: 0.25,
		Status:           StatusCounts{OK: 3, Error: 1, Limit: 1},
		KnowledgeAnswers: 2, NoisyDocShare: 0.5,
		LengthFinishShare: 0.25,
	},
	{
		Step: 2, PolicyVersion: 1, Trajectories: 2, Prompts: 1,
		Accuracy: 1, FailedTasks: 0, SolvedAllTasks: 1, MeanReward: 0.75,
		ResponseTokens: 8, ResponseLengthP50: 3, ResponseLengthP95: 5,
	},
	{Step: 5, PolicyVersion: 4},
}

func checkReport(t *testing.T, run string, rep Report) {
	t.Helper()
	if len(rep.Steps) != len(want) {
		t.Fatalf("report has %d steps, want %d: %+v", len(rep.Steps), len(want), rep.Steps)
	}
	for i, w := range want {
		compareMetrics(t, rep.Steps[i], w)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Step != 3 || !strings.Contains(rep.Skipped[0].Reason, "not committed") {
		t.Errorf("skipped = %+v; want step 3, not committed", rep.Skipped)
	}
	if rep.Run != run {
		t.Errorf("report run = %q, want %q", rep.Run, run)
	}
}

// compareMetrics compares every field, floats within 1e-12 (they are ratios
// of small integers computed in float64).
func compareMetrics(t *testing.T, got, want StepMetrics) {
	t.Helper()
	compareFields(t, "step "+itoa(want.Step), reflect.ValueOf(got), reflect.ValueOf(want))
}

func compareFields(t *testing.T, path string, g, w reflect.Value) {
	t.Helper()
	switch g.Kind() {
	case reflect.Struct:
		for i := 0; i < g.NumField(); i++ {
			compareFields(t, path+"."+g.Type().Field(i).Name, g.Field(i), w.Field(i))
		}
	case reflect.Pointer:
		if g.IsNil() != w.IsNil() {
			t.Errorf("%s = %v, want %v", path, g.Interface(), w.Interface())
		} else if !g.IsNil() {
			compareFields(t, path, g.Elem(), w.Elem())
		}
	case reflect.Float64:
		if math.Abs(g.Float()-w.Float()) > 1e-12 {
			t.Errorf("%s = %v, want %v", path, g.Float(), w.Float())
		}
	default:
		if g.Interface() != w.Interface() {
			t.Errorf("%s = %v, want %v", path, g.Interface(), w.Interface())
		}
	}
}

func itoa(k int64) string { return string(rune('0' + k)) }

func readReport(t *testing.T, out string) Report {
	t.Helper()
	b, err := storage.ReadFile(context.Background(), storage.Join(out, JSONName))
	if err != nil {
		t.Fatalf("read the report: %v", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s is not JSON: %v", JSONName, err)
	}
	return rep
}

func runPipeline(t *testing.T, run, out string, r StepRange) Plan {
	t.Helper()
	plan, err := Discover(context.Background(), run, r)
	if err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	Build(s, plan, out)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	return plan
}

func TestAnalyzeLocal(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	out := filepath.Join(run, "analysis")
	runPipeline(t, run, out, AllSteps)
	checkReport(t, run, readReport(t, out))

	md, err := os.ReadFile(filepath.Join(out, MarkdownName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Step 1", "## Step 2", "## Step 5", "| failed tasks (all samples wrong) | 0.5000 |", "| 1 | 4 | 2 | 0.250 | 0.500 | 0.000 | 1.250 | 0.318 | 4 / 10 | 100.0 / 300.0 | 0.250 | 0.500 | 0.250 |", "step-000003"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("%s lacks %q:\n%s", MarkdownName, s, md)
		}
	}
	for _, name := range []string{FailedTasksPNG, AccuracyPNG, InteractionsPNG, DynamicsPNG} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is not a valid PNG: %v", name, err)
		}
		if r := img.Bounds(); r.Dx() < 400 || r.Dy() < 300 {
			t.Errorf("%s is %dx%d pixels, want at least 400x300", name, r.Dx(), r.Dy())
		}
	}
}

func TestStepRange(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	r, err := ParseStepRange("2-4")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Discover(context.Background(), run, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 1 || plan.Steps[0].Step != 2 || len(plan.Skipped) != 1 || plan.Skipped[0].Step != 3 {
		t.Errorf("steps 2-4: plan %+v; want step 2 read and step 3 skipped", plan)
	}
	for s, w := range map[string]StepRange{"": AllSteps, "3": {3, 3}, "2-": {2, -1}, "-7": {-1, 7}, "0-10": {0, 10}} {
		if got, err := ParseStepRange(s); err != nil || got != w {
			t.Errorf("ParseStepRange(%q) = %+v, %v; want %+v", s, got, err, w)
		}
	}
	for _, s := range []string{"a-b", "5-2", "-", "-3-4", "1.5"} {
		if _, err := ParseStepRange(s); err == nil {
			t.Errorf("ParseStepRange(%q) accepted", s)
		}
	}
	if _, err := Discover(context.Background(), run, StepRange{First: 3, Last: 4}); err == nil || !strings.Contains(err.Error(), "no committed step") {
		t.Errorf("a range with only an uncommitted step: %v", err)
	}
}

func TestCorruptShardFailsNamingIt(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	shard := filepath.Join(schemas.StepDir(run, 2), "shards", "part-0.parquet")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := Discover(context.Background(), run, AllSteps)
	if err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	Build(s, plan, filepath.Join(run, "analysis"))
	err = ptest.Run(p)
	if err == nil || !strings.Contains(err.Error(), "part-0.parquet") || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a flipped byte should fail the pipeline naming the shard; got %v", err)
	}
}

func TestBuildReportChecksRowCounts(t *testing.T) {
	plan := Plan{Run: "r", Steps: []StepRef{{Step: 1, Dir: "r/step-000001", Rows: 2}}}
	if _, err := BuildReport(plan, []stepAcc{{Step: 1, Trajectories: 1}}, nil); err == nil || !strings.Contains(err.Error(), "manifest commits 2 rows") {
		t.Errorf("row-count mismatch: %v", err)
	}
	if _, err := BuildReport(plan, []stepAcc{{Step: 1, Trajectories: 2}, {Step: 9, Trajectories: 1}}, nil); err == nil || !strings.Contains(err.Error(), "step 9") {
		t.Errorf("stray step: %v", err)
	}
}

func TestAnalyzeFakeGCS(t *testing.T) {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "runs"})
	run := "gs://runs/toy"
	buildRun(t, run)
	out := "gs://runs/reports/toy"
	runPipeline(t, run, out, AllSteps)
	checkReport(t, run, readReport(t, out))
	b, err := storage.ReadFile(context.Background(), storage.Join(out, DynamicsPNG))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("%s on gs:// is not a valid PNG: %v", DynamicsPNG, err)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	for _, c := range []struct {
		vals    []float64
		p, want float64
	}{
		{nil, 50, 0}, {[]float64{7}, 95, 7}, {[]float64{1, 2, 3, 4}, 50, 2}, {[]float64{1, 2, 3, 4}, 95, 4},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 50, 5}, {[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9}, {[]float64{1, 2, 3}, 0, 1},
	} {
		if got := percentile(c.vals, c.p); got != c.want {
			t.Errorf("percentile(%v, %g) = %g, want %g", c.vals, c.p, got, c.want)
		}
	}
}
