package rollout

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/advantage"
	_ "github.com/aipo-rl/aipo/transforms/collab/kinds"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

// demoConfig is a small demo run in dir with extra YAML appended.
func demoConfig(t *testing.T, dir, endpoint, extra string) runconfig.Config {
	t.Helper()
	text := fmt.Sprintf(`
run: {name: test, dir: %q, seed: 5}
data: {demo: true, batch_size: 12}
policy: {endpoint: %q, max_response_tokens: 24, stop: [";"], backoff_initial: 1ms, backoff_max: 2ms}
rollout: {group_size: 4, opener_by: policy, answer_token_budget: 8, max_in_flight: 8, prompts_per_batch: 5, prompt_template: "{{.Problem}}"}
`, dir, endpoint) + extra
	c, err := runconfig.Parse([]byte(text), "test.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runUnderLease is one aipo rollout: it takes the lease of the run
// directory, runs the step under it and releases it.
func runUnderLease(t testing.TB, ctx context.Context, o Options) (schemas.Manifest, error) {
	t.Helper()
	l, lctx, err := runlease.Acquire(ctx, o.Config.Run.Dir, runlease.Options{Command: "aipo rollout"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Release(); err != nil {
			t.Errorf("release the lease of %s: %v", o.Config.Run.Dir, err)
		}
	}()
	return Run(lctx, o)
}

func runStep(t *testing.T, c runconfig.Config, step int64, force bool) ([]schemas.Trajectory, schemas.Manifest) {
	t.Helper()
	ctx := context.Background()
	m, err := runUnderLease(t, ctx, Options{Config: c, Step: step, Force: force})
	if err != nil {
		t.Fatal(err)
	}
	rows, m2, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, step))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Files, m2.Files) {
		t.Fatalf("Run returned a manifest other than the committed one")
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].PromptID != rows[j].PromptID {
			return rows[i].PromptID < rows[j].PromptID
		}
		return rows[i].SampleIndex < rows[j].SampleIndex
	})
	return rows, m
}

func metaInt(t *testing.T, m schemas.Manifest, key string) int64 {
	t.Helper()
	v, ok := m.Meta[key]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("meta %s = %q is not an integer", key, v)
	}
	return n
}

// checkGroups checks G trajectories per prompt, the verifier's rewards, the
// advantage formula and the provenance of every interaction.
func checkGroups(t *testing.T, c runconfig.Config, rows []schemas.Trajectory, prompts int) {
	t.Helper()
	G := c.Rollout.GroupSize
	byPrompt := map[string][]schemas.Trajectory{}
	for _, r := range rows {
		byPrompt[r.PromptID] = append(byPrompt[r.PromptID], r)
	}
	if len(byPrompt) != prompts {
		t.Fatalf("%d prompts in the shards, want %d", len(byPrompt), prompts)
	}
	tok := tokenizer.Builtin()
	decode := func(ids []int32) string {
		in := make([]int, len(ids))
		for i, id := range ids {
			in[i] = int(id)
		}
		s, err := tok.Decode(in, true)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for id, g := range byPrompt {
		if len(g) != G {
			t.Fatalf("prompt %s has %d trajectories, want G=%d", id, len(g), G)
		}
		_, qid, _ := strings.Cut(id, "-")
		name, nText, _ := strings.Cut(qid, "+")
		n, _ := strconv.Atoi(nText)
		value, _ := demo.SourcesTask(c.Data.Sources)
		v, _ := value.Lookup(name)
		answer := v + n
		var rewards []float32
		var live []int
		for i, r := range g {
			if int(r.SampleIndex) != i {
				t.Fatalf("prompt %s: sample %d at position %d", id, r.SampleIndex, i)
			}
			if r.PolicyVersion != 3 || r.Run != "test" || r.DataSource != demo.DataSource {
				t.Errorf("prompt %s sample %d: version %d run %q source %q", id, i, r.PolicyVersion, r.Run, r.DataSource)
			}
			// Provenance: spans hold the answer (agent's source, or
			// template for notices) and </result>; everything else is the
			// policy's, with its log-probs.
			var own []int32
			inSpan := make([]bool, len(r.ResponseIDs))
			for k, a := range r.InteractionAgent {
				s, e := r.InteractionSpanStart[k], r.InteractionSpanEnd[k]
				for j := s; j < e; j++ {
					inSpan[j] = true
				}
				want := map[string]int8{"verify": schemas.SourceVerify, "knowledge": schemas.SourceKnowledge, "reason": schemas.SourceReason}[a]
				if r.InteractionStatus[k] != schemas.StatusOK {
					want = schemas.SourceTemplate
				}
				for j := s; j < e-1; j++ {
					if r.TokenSource[j] != want {
						t.Fatalf("prompt %s sample %d: token %d in %s span has source %s, want %s", id, i, j, a, schemas.SourceName(r.TokenSource[j]), schemas.SourceName(want))
					}
				}
				if r.TokenSource[e-1] != schemas.SourceTemplate || decode(r.ResponseIDs[e-1:e]) != "</result>" {
					t.Fatalf("prompt %s sample %d: span %d does not end with a template </result>", id, i, k)
				}
				if got := decode(r.ResponseIDs[s : e-1]); got != r.InteractionResult[k] {
					t.Fatalf("prompt %s sample %d: span text %q, interaction_result %q", id, i, got, r.InteractionResult[k])
				}
			}
			for j, src := range r.TokenSource {
				if (src == schemas.SourcePolicy) == inSpan[j] {
					t.Fatalf("prompt %s sample %d: token %d source %s, in a span %v", id, i, j, schemas.SourceName(src), inSpan[j])
				}
				if src == schemas.SourcePolicy {
					own = append(own, r.ResponseIDs[j])
					if r.BehaviorLogProbs[j] >= 0 {
						t.Fatalf("prompt %s sample %d: policy token %d has log-prob %v", id, i, j, r.BehaviorLogProbs[j])
					}
				}
			}
			if r.FinishReason == schemas.FinishError {
				if r.Reward != 0 || r.Correct || r.Advantage != 0 {
					t.Errorf("prompt %s sample %d failed but has reward %v correct %v advantage %v", id, i, r.Reward, r.Correct, r.Advantage)
				}
				continue
			}
			correct, _ := demo.Score(decode(own), answer)
			want := float32(0)
			if correct {
				want = 1
			}
			want -= float32(c.Rollout.InteractionCost) * float32(len(r.InteractionAgent))
			if r.Correct != correct || r.Reward != want {
				t.Errorf("prompt %s sample %d: reward %v correct %v, the verifier says %v %v (policy text %q)", id, i, r.Reward, r.Correct, want, correct, decode(own))
			}
			rewards = append(rewards, r.Reward)
			live = append(live, i)
		}
		if len(rewards) == 0 {
			continue
		}
		adv, err := c.Advantage.Advantages(rewards)
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range live {
			if math.Abs(float64(g[i].Advantage-adv[k])) > 1e-6 {
				t.Errorf("prompt %s sample %d: advantage %v, the formula gives %v (rewards %v)", id, i, g[i].Advantage, adv[k], rewards)
			}
		}
	}
}

// comparable returns rows without the measured latencies (wall time).
func comparable(rows []schemas.Trajectory) []schemas.Trajectory {
	out := make([]schemas.Trajectory, len(rows))
	for i, r := range rows {
		r.InteractionLatencyMs = make([]float32, len(r.InteractionLatencyMs))
		out[i] = r
	}
	return out
}

func TestRolloutDemo(t *testing.T) {
	dir := t.TempDir()
	c := demoConfig(t, filepath.Join(dir, "run"), "demoplayer:///", "")
	rows, m := runStep(t, c, 2, false)
	checkGroups(t, c, rows, 12)
	if m.PolicyVersion != 3 || m.Step != 2 || m.Run != "test" || m.Rows != 48 {
		t.Errorf("manifest: version %d step %d run %q rows %d", m.PolicyVersion, m.Step, m.Run, m.Rows)
	}
	var calls, correct int64
	for _, r := range rows {
		calls += int64(len(r.InteractionAgent))
		if r.Correct {
			correct++
		}
	}
	if calls == 0 || calls == 48 {
		t.Errorf("%d interactions in 48 trajectories; the player calls with probability 0.6", calls)
	}
	for key, want := range map[string]int64{"prompts": 12, "trajectories": 48, "trajectories_written": 48, "interactions": calls, "interactions.knowledge": calls, "correct": correct, "policy_errors": 0, "groups_dropped": 0} {
		if got := metaInt(t, m, key); got != want {
			t.Errorf("manifest meta %s = %d, want %d", key, got, want)
		}
	}
	if m.Meta["opener_by"] != "policy" || m.Meta["template_tokens"] != "untrained" || m.Meta["config_hash"] != c.Hash() {
		t.Errorf("static meta: %v (config hash now %s)", m.Meta, c.Hash())
	}

	// The same step again, with the same seed: the same rows.
	if _, err := runUnderLease(t, context.Background(), Options{Config: c, Step: 2}); err == nil || !strings.Contains(err.Error(), "already committed") {
		t.Errorf("rolling out a committed step again without Force: %v", err)
	}
	// The forced re-run must write the step again: the first run's shards
	// are stamped (its manifest stays, so the step still reads as
	// committed) and the rows compared below are read through the manifest
	// the re-run commits, so a re-run that wrote nothing cannot pass.
	for _, f := range m.Files {
		testtools.Stamp(t, filepath.Join(rundir.Step(c.Run.Dir, 2), filepath.FromSlash(f.Path)))
	}
	again, m2 := runStep(t, c, 2, true)
	if !reflect.DeepEqual(comparable(rows), comparable(again)) {
		t.Errorf("re-running step 2 gave different rows")
	}
	for k, v := range m.Meta {
		if k != "collab_latency_ms_mean" && m2.Meta[k] != v {
			t.Errorf("re-run meta %s = %q, first run %q", k, m2.Meta[k], v)
		}
	}
	// Another step draws other prompts.
	other, _ := runStep(t, c, 3, false)
	if reflect.DeepEqual(promptIDs(rows), promptIDs(other)) {
		t.Errorf("steps 2 and 3 rolled out the same prompts")
	}
}

func promptIDs(rows []schemas.Trajectory) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.PromptID)
	}
	return ids
}

// TestRolloutDynamicSampling drops the groups whose rewards are all equal
// (with a per-call cost in the rewards) and refills the batch from further
// demo questions: the step trains on exactly data.batch_size groups, and
// the manifest says how many prompts were drawn to get there.
func TestRolloutDynamicSampling(t *testing.T) {
	c := demoConfig(t, filepath.Join(t.TempDir(), "run"), "demoplayer:///", "advantage: {dynamic_sampling: true}\n")
	c.Rollout.InteractionCost = 0.1
	rows, m := runStep(t, c, 0, false)
	checkDynamic(t, m, rows, 12, 4)
	if draws := metaInt(t, m, "draws"); draws < 2 || metaInt(t, m, "groups_dropped") == 0 {
		t.Errorf("draws %d, dropped %d: this seed drops groups in the first draw, so a refill should have run", draws, metaInt(t, m, "groups_dropped"))
	}
	checkGroups(t, c, rows, 12)

	// Without refill the dropped groups stay missing.
	c.Advantage.MaxRefillRounds = 0
	c.Run.Dir = filepath.Join(t.TempDir(), "norefill")
	c.Fill()
	rows, m = runStep(t, c, 0, false)
	kept, dropped := metaInt(t, m, "groups_kept"), metaInt(t, m, "groups_dropped")
	if kept+dropped != 12 || kept == 12 || int64(len(rows)) != 4*kept || metaInt(t, m, "groups_short") != 12-kept || metaInt(t, m, "draws") != 1 {
		t.Errorf("without refill: kept %d dropped %d, %d rows, meta %v", kept, dropped, len(rows), m.Meta)
	}
}

// checkDynamic checks a step under dynamic sampling: batch groups of G
// kept, none with all-equal rewards, and counts that add up.
func checkDynamic(t *testing.T, m schemas.Manifest, rows []schemas.Trajectory, batch, G int) {
	t.Helper()
	byPrompt := map[string][]float32{}
	for _, r := range rows {
		byPrompt[r.PromptID] = append(byPrompt[r.PromptID], r.Reward)
	}
	for id, rs := range byPrompt {
		if advantage.AllEqual(rs) {
			t.Errorf("prompt %s has all-equal rewards %v but was kept", id, rs)
		}
	}
	drawn, kept, dropped, surplus := metaInt(t, m, "prompts"), metaInt(t, m, "groups_kept"), metaInt(t, m, "groups_dropped"), metaInt(t, m, "groups_surplus")
	if len(byPrompt) != batch || int(kept) != batch || len(rows) != batch*G || metaInt(t, m, "trajectories_written") != int64(len(rows)) {
		t.Errorf("%d groups in the shards, kept %d, %d rows: want the batch of %d groups of %d", len(byPrompt), kept, len(rows), batch, G)
	}
	if drawn != kept+dropped+surplus || drawn <= int64(batch) && dropped > 0 || metaInt(t, m, "trajectories") != drawn*int64(G) {
		t.Errorf("prompts drawn %d = kept %d + dropped %d + surplus %d? trajectories sampled %d", drawn, kept, dropped, surplus, metaInt(t, m, "trajectories"))
	}
	if metaInt(t, m, "groups_short") != 0 {
		t.Errorf("groups_short = %d with prompts to spare", metaInt(t, m, "groups_short"))
	}
}

// TestRolloutDynamicSamplingFiles refills from a prompt file: further
// prompts are ones no earlier draw of the step took, the first draw is the
// step's ordinary selection, and a dataset too small to fill the batch
// trains on what it kept, saying how many groups it lacks.
func TestRolloutDynamicSamplingFiles(t *testing.T) {
	dir := t.TempDir()
	task, _ := demo.New(demo.DefaultConfig())
	var lines, all []string
	for i, q := range task.AllQuestions(demo.SplitAll)[:60] {
		lines = append(lines, fmt.Sprintf(`{"id":"p%02d","problem":%q,"answer":"%d"}`, i, q.Prompt, q.Answer))
		all = append(all, fmt.Sprintf("demo/p%02d", i))
	}
	file := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`
run: {name: files, dir: %q, seed: 2}
data: {sources: [{path: %q, data_source: demo}], batch_size: 10}
policy: {endpoint: "demoplayer:///", max_response_tokens: 24, stop: [";"]}
rollout: {group_size: 3, opener_by: policy, max_in_flight: 8, prompt_template: "{{.Problem}}"}
collaborators: {knowledge: {kind: builtin-demo}}
advantage: {dynamic_sampling: true}
eval: {every: 0}
`, filepath.Join(dir, "run"), file)
	c, err := runconfig.Parse([]byte(text), "files.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	rows, m := runStep(t, c, 1, false)
	checkDynamic(t, m, rows, 10, 3)
	// Every prompt trained on is either one of the step's ordinary batch
	// or a further draw; the first draw is exactly ChooseIDs'.
	first := map[string]bool{}
	for _, id := range trajectories.ChooseIDs(all, 2, 1, 10) {
		first[id] = true
	}
	refill := map[string]bool{}
	for _, id := range trajectories.RefillOrder(all, 2, 1) {
		if !first[id] {
			refill[id] = true
		}
	}
	for _, r := range rows {
		if !first[r.PromptID] && !refill[r.PromptID] {
			t.Errorf("trained prompt %s is in no draw", r.PromptID)
		}
	}

	// Five prompts cannot fill a batch of ten: the step trains on the
	// groups it kept and says how many it lacks.
	small := filepath.Join(dir, "small.jsonl")
	if err := os.WriteFile(small, []byte(strings.Join(lines[:5], "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Data.Sources[0].Path, c.Run.Dir = small, filepath.Join(dir, "small")
	c.Data.DeadLetterDir = ""
	c.Fill()
	rows, m = runStep(t, c, 0, false)
	kept := metaInt(t, m, "groups_kept")
	if metaInt(t, m, "prompts") != 5 || kept+metaInt(t, m, "groups_dropped") != 5 || metaInt(t, m, "groups_short") != 10-kept || int64(len(rows)) != 3*kept {
		t.Errorf("small dataset: meta %v, %d rows", m.Meta, len(rows))
	}
}

// TestRolloutFaults runs the LLM collaborators against a server failing 30%
// of requests and a policy failing 5% of calls transiently and ~3% for
// good: every prompt still yields G trajectories and the failures are
// counted in the manifest.
func TestRolloutFaults(t *testing.T) {
	llm := newFakeLLM(t, 0.30, 600*time.Millisecond) // a stall twice the role timeout
	roles := ""
	for _, a := range []string{"verify", "knowledge", "reason"} {
		noise := ""
		if a == "knowledge" {
			noise = ", noise: {constant: 0.2}"
		}
		roles += fmt.Sprintf("  %s: {kind: openai, endpoint: %q, model: m, system: demo, prompt: '{{if .Noisy}}NOISY {{end}}{{.Query}}', timeout: 300ms, retries: 1, backoff: {initial: 1ms, max: 2ms}, breaker: {failures: -1}, cache: false%s}\n", a, llm.endpoint(a), noise)
	}
	c := demoConfig(t, filepath.Join(t.TempDir(), "run"), "demoplayer:///?fail=0.05&perm=0.03", "collaborators:\n"+roles)
	c.Data.BatchSize = 24
	rows, m := runStep(t, c, 1, false)
	checkGroups(t, c, rows, 24)
	var failedCalls, errs, timeouts, policyErrors int64
	for _, r := range rows {
		for _, s := range r.InteractionStatus {
			switch s {
			case schemas.StatusError:
				failedCalls++
				errs++
			case schemas.StatusTimeout:
				failedCalls++
				timeouts++
			}
		}
		if r.FinishReason == schemas.FinishError {
			policyErrors++
		}
	}
	t.Logf("%d requests to the collaborators, faults by kind %v: %d calls failed (%d error, %d timeout); %d policy failures, %d retries",
		llm.requests.Load(), faultCounts(llm), failedCalls, errs, timeouts, policyErrors, metaInt(t, m, "policy_retries"))
	if failedCalls == 0 || errs == 0 || timeouts == 0 || policyErrors == 0 || metaInt(t, m, "policy_retries") == 0 {
		t.Errorf("faults not exercised: %d failed calls (%d error, %d timeout), %d policy errors, %s retries", failedCalls, errs, timeouts, policyErrors, m.Meta["policy_retries"])
	}
	for key, want := range map[string]int64{"collab_failures": failedCalls, "policy_errors": policyErrors, "trajectories": 96, "trajectories_written": 96} {
		if got := metaInt(t, m, key); got != want {
			t.Errorf("manifest meta %s = %d, want %d", key, got, want)
		}
	}
	for i, n := range faultCounts(llm) {
		if n == 0 {
			t.Errorf("the server never injected a %q fault", faultKinds[i])
		}
	}
}

func faultCounts(f *fakeLLM) []int64 {
	out := make([]int64, len(faultKinds))
	for i := range out {
		out[i] = f.faults[i].Load()
	}
	return out
}

// TestRolloutPromptFiles reads prompts from a file with a bad row: the
// batch is chosen from the good rows and the bad one is dead-lettered.
func TestRolloutPromptFiles(t *testing.T) {
	dir := t.TempDir()
	task, _ := demo.New(demo.DefaultConfig())
	var lines []string
	for i, q := range task.AllQuestions(demo.SplitAll)[:30] {
		lines = append(lines, fmt.Sprintf(`{"id":"p%02d","problem":%q,"answer":"%d"}`, i, q.Prompt, q.Answer))
	}
	lines = append(lines, `{"id":"bad","problem":"no answer here"}`)
	file := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`
run: {name: files, dir: %q, seed: 2}
data: {sources: [{path: %q, data_source: demo}], batch_size: 8}
policy: {endpoint: "demoplayer:///", max_response_tokens: 24, stop: [";"]}
rollout: {group_size: 3, opener_by: policy, max_in_flight: 4, prompt_template: "{{.Problem}}"}
collaborators: {knowledge: {kind: builtin-demo}}
eval: {every: 0}
`, filepath.Join(dir, "run"), file)
	c, err := runconfig.Parse([]byte(text), "files.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	rows, m := runStep(t, c, 4, false)
	ids := map[string]int{}
	for _, r := range rows {
		ids[r.PromptID]++
		if r.DataSource != "demo" {
			t.Errorf("row data_source %q", r.DataSource)
		}
	}
	if len(ids) != 8 || len(rows) != 24 {
		t.Errorf("%d prompts, %d rows; want 8 prompts of 3", len(ids), len(rows))
	}
	if metaInt(t, m, "dead_letters") != 1 {
		t.Errorf("dead_letters = %q, want 1", m.Meta["dead_letters"])
	}
	dl, err := os.ReadFile(c.DeadLetterPath(4))
	if err != nil || !strings.Contains(string(dl), "bad") {
		t.Errorf("dead-letter file: %v %q", err, dl)
	}
	// The batch follows ChooseIDs.
	all := make([]string, 30)
	for i := range all {
		all[i] = fmt.Sprintf("demo/p%02d", i)
	}
	for _, id := range trajectories.ChooseIDs(all, 2, 4, 8) {
		if ids[id] != 3 {
			t.Errorf("prompt %s chosen by ChooseIDs has %d rows", id, ids[id])
		}
	}
}
