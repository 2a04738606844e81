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

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

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

// withVersions gives t's tokens the policy versions v (continued across a
// weight push when they differ).
func withVersions(t schemas.Trajectory, v ...int64) schemas.Trajectory {
	t.TokenPolicyVersion = v
	if err := t.Validate(); err != nil {
		panic(fmt.Sprintf("test trajectory %s/%d is invalid: %v", t.PromptID, t.SampleIndex, err))
	}
	return t
}

// writeStep writes each group of rows as one shard of step k and commits
// the step unless commit is false.
func writeStep(t *testing.T, run string, k int64, commit bool, shards ...[]schemas.Trajectory) {
	t.Helper()
	ctx := context.Background()
	dir := rundir.Step(run, k)
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
		withVersions(traj(2, "p3", 1, true, 0.5, "stop", []int8{P, P, P, P, P}), 1, 1, 2, 2, 2),
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
		// policy tokens 3+4+3+2, all of version 0 (no token versions: the row's).
		PolicyVersionTokens: map[string]int64{"0": 12},
	},
	{
		Step: 2, PolicyVersion: 1, Trajectories: 2, Prompts: 1,
		Accuracy: 1, FailedTasks: 0, SolvedAllTasks: 1, MeanReward: 0.75,
		ResponseTokens: 8, ResponseLengthP50: 3, ResponseLengthP95: 5,
		// p3/0 at version 1; p3/1 continued on version 2 after 2 tokens.
		PolicyVersionTokens: map[string]int64{"1": 5, "2": 3}, MixedSamples: 1,
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
	case reflect.Map:
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("%s = %v, want %v", path, g.Interface(), w.Interface())
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
	for _, s := range []string{"## Step 1", "## Step 2", "## Step 5", "| failed tasks (all samples wrong) | 0.5000 |", "| policy tokens by version | 1: 5 (0.625), 2: 3 (0.375) |", "| 1 | 4 | 2 | 0.250 | 0.500 | 0.000 | 1.250 | 0.318 | 4 / 10 | 100.0 / 300.0 | 0.250 | 0.500 | 0.250 |", "step-000003"} {
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

// A shard that does not match its manifest does not fail the analysis: its
// step is skipped, naming the shard and the mismatch, and the other steps
// are reported as they are.
func TestCorruptShardIsNamedAndItsStepSkipped(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	shard := filepath.Join(rundir.Step(run, 2), "shards", "part-0.parquet")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(run, "analysis")
	runPipeline(t, run, out, AllSteps)
	rep := readReport(t, out)
	if len(rep.Steps) != 2 || rep.Steps[0].Step != 1 || rep.Steps[1].Step != 5 {
		t.Fatalf("steps %+v; want 1 and 5", rep.Steps)
	}
	compareMetrics(t, rep.Steps[0], want[0])
	if len(rep.Unreadable) != 1 || rep.Unreadable[0].Shard != shard || rep.Unreadable[0].Step != 2 || !strings.Contains(rep.Unreadable[0].Reason, "corrupt") {
		t.Errorf("unreadable %+v; want %s of step 2, corrupt", rep.Unreadable, shard)
	}
	if len(rep.Skipped) != 2 || rep.Skipped[0].Step != 2 || !strings.Contains(rep.Skipped[0].Reason, shard) || rep.Skipped[1].Step != 3 {
		t.Errorf("skipped %+v; want step 2 naming %s, then step 3", rep.Skipped, shard)
	}
	md, err := os.ReadFile(filepath.Join(out, MarkdownName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Unreadable shards") || !strings.Contains(string(md), shard) {
		t.Errorf("%s does not list the unreadable shard:\n%s", MarkdownName, md)
	}

	// With every step unreadable nothing is reported: that is an error
	// naming a shard.
	run2 := filepath.Join(t.TempDir(), "run2")
	writeStep(t, run2, 1, true, []schemas.Trajectory{traj(1, "p1", 0, true, 1, "eos", []int8{P})})
	if err := os.WriteFile(filepath.Join(rundir.Step(run2, 1), "shards", "part-0.parquet"), []byte("gone"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := Discover(context.Background(), run2, AllSteps)
	if err != nil {
		t.Fatal(err)
	}
	p, sc := beam.NewPipelineWithRoot()
	Build(sc, plan, filepath.Join(run2, "analysis"))
	if err := ptest.Run(p); err == nil || !strings.Contains(err.Error(), "no step of "+run2+" could be read") || !strings.Contains(err.Error(), "part-0.parquet") {
		t.Fatalf("a run with no readable step: %v; want an error naming a shard", err)
	}
}

// The learner's records reach the report: from metrics.jsonl, else from a
// step's own metrics file.
func TestLearnerMetricsInTheReport(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	ctx := context.Background()
	jsonl := `{"kind":"learn","step":1,"policy_version":1,"tokens":22,"loss":0.25,"grad_norm":1.5,"lr":0.0002,"loss_metrics":{"approx_kl_old":0.01,"kl_ref":0,"clip_frac_low":0.1,"clip_frac_high":0.2,"clip_frac_dual":0,"ext_prob_mean":0.6,"ext_under_omega_frac":0.3}}
{"kind":"eval","step":2,"policy_version":2,"splits":[]}
{"kind":"learn","step":2,"policy_version":2,"tokens":8,"loss":-0.5,"grad_norm":0.5,"lr":0.0001,"loss_metrics":{"approx_kl_old":0.02,"ext_prob_mean":0.7}}
`
	if err := storage.WriteAtomic(ctx, storage.Join(run, "metrics.jsonl"), []byte(jsonl)); err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteAtomic(ctx, storage.Join(run, "metrics", "learn-000005.json"), []byte(`{"kind":"learn","step":5,"loss":0.125,"grad_norm":0.25,"lr":5e-05,"loss_metrics":{"ext_prob_mean":0.9}}`)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(run, "analysis")
	runPipeline(t, run, out, AllSteps)
	rep := readReport(t, out)
	if len(rep.Steps) != 3 {
		t.Fatalf("%d steps, want 3", len(rep.Steps))
	}
	for i, w := range []LearnerMetrics{
		{Loss: 0.25, GradNorm: 1.5, LR: 0.0002, Tokens: 22, Metrics: map[string]float64{"approx_kl_old": 0.01, "kl_ref": 0, "clip_frac_low": 0.1, "clip_frac_high": 0.2, "clip_frac_dual": 0, "ext_prob_mean": 0.6, "ext_under_omega_frac": 0.3}},
		{Loss: -0.5, GradNorm: 0.5, LR: 0.0001, Tokens: 8, Metrics: map[string]float64{"approx_kl_old": 0.02, "ext_prob_mean": 0.7}},
		{Loss: 0.125, GradNorm: 0.25, LR: 5e-05, Metrics: map[string]float64{"ext_prob_mean": 0.9}},
	} {
		if got := rep.Steps[i].Learner; got == nil || !reflect.DeepEqual(*got, w) {
			t.Errorf("step %d learner = %+v, want %+v", rep.Steps[i].Step, got, w)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, MarkdownName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Learner", "![learner](learner.png)", "| 1 | 0.25 | 1.5 | 0.0002 | 0.01 | 0 | 0.1 / 0.2 / 0 | 0.6 | 0.3 |", "| 2 | -0.5 | 0.5 | 0.0001 | 0.02 | - | - / - / - | 0.7 | - |", "| learner ext_prob_mean | 0.9 |"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("%s lacks %q:\n%s", MarkdownName, s, md)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, LearnerPNG))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// Five panels (loss, gradient norm, KL, clipped tokens, external
	// tokens) in two rows of three.
	if r := img.Bounds(); r.Dx() < 3*r.Dy()/2 || r.Dy() < 600 {
		t.Errorf("%s is %dx%d pixels; want two rows of three panels", LearnerPNG, r.Dx(), r.Dy())
	}
	plots, err := learnerPlots(rep.Steps)
	if err != nil {
		t.Fatal(err)
	}
	if len(plots) != 5 || plots[4].Title.Text != "External tokens" {
		t.Errorf("%d learner panels, want 5 ending with the external tokens", len(plots))
	}
}

// A legend is drawn beside the plot, outside its data area, so that it
// covers no line.
func TestLegendClearOfTheData(t *testing.T) {
	steps := []StepMetrics{{Step: 0, Trajectories: 1, InteractionsPerTrajectory: AgentCounts{Total: 1, Knowledge: 1}},
		{Step: 1, Trajectories: 1, InteractionsPerTrajectory: AgentCounts{Total: 2, Verify: 1, Knowledge: 1}}}
	p, err := linePlot("interactions", "per trajectory", fromZero, steps,
		series{"total", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Total })},
		series{"knowledge", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Knowledge })})
	if err != nil {
		t.Fatal(err)
	}
	data, legend := DrawClear(p, draw.New(vgimg.New(6*vg.Inch, 4*vg.Inch)))
	if legend.Size().X <= 0 || legend.Size().Y <= 0 {
		t.Fatalf("no legend drawn: %+v", legend)
	}
	if legend.Min.X < data.Max.X {
		t.Errorf("legend %+v overlaps the data area %+v", legend, data)
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
