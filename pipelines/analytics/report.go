package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.DoFn4x1[context.Context, []byte, func(*stepAcc) bool, func(*UnreadableShard) bool, error](&writeReportFn{})
	register.Iter1[stepAcc]()
	register.Iter1[UnreadableShard]()
}

// Report is the content of analysis.json.
type Report struct {
	Run   string        `json:"run"`
	Steps []StepMetrics `json:"steps"`
	// Skipped are the step directories not analysed: not committed, or
	// with a shard that could not be read (then named in Unreadable).
	Skipped []Skipped `json:"skipped,omitempty"`
	// Unreadable are the shards that could not be read, with the reason.
	Unreadable []UnreadableShard `json:"unreadable,omitempty"`
	// Heldout are the run's evaluations on its held-out benchmarks
	// (eval.benchmarks), in step order.
	Heldout []records.BenchmarkEval `json:"heldout,omitempty"`
}

// File names written into the output directory.
const (
	JSONName     = "analysis.json"
	MarkdownName = "analysis.md"
)

// BuildReport turns the per-step accumulators into the report. Every
// committed step of the plan gets an entry (a step with no rows gets zero
// metrics), and each step's trajectory count must equal its manifest's row
// count. A step with an unreadable shard is left out of the steps (its
// other shards would give figures of part of its batch) and listed among
// the skipped ones, naming the shard; if no step is left, that is an error.
func BuildReport(plan Plan, accs []stepAcc, bad []UnreadableShard) (Report, error) {
	byStep := map[int64]stepAcc{}
	for _, a := range accs {
		if prev, ok := byStep[a.Step]; ok {
			a = merge(prev, a)
		}
		byStep[a.Step] = a
	}
	sort.Slice(bad, func(i, j int) bool {
		if bad[i].Step != bad[j].Step {
			return bad[i].Step < bad[j].Step
		}
		return bad[i].Shard < bad[j].Shard
	})
	badByStep := map[int64][]UnreadableShard{}
	for _, u := range bad {
		badByStep[u.Step] = append(badByStep[u.Step], u)
	}
	rep := Report{Run: plan.Run, Skipped: slices.Clone(plan.Skipped), Unreadable: bad}
	for _, ref := range plan.Steps {
		a, ok := byStep[ref.Step]
		delete(byStep, ref.Step)
		if us := badByStep[ref.Step]; len(us) > 0 {
			first := us[0].Reason
			if !strings.Contains(first, us[0].Shard) {
				first = us[0].Shard + ": " + first
			}
			reason := fmt.Sprintf("%d of its %d shards unreadable: %s", len(us), len(ref.Files), first)
			if len(us) > 1 {
				reason += fmt.Sprintf(" (and %d more, listed under unreadable)", len(us)-1)
			}
			rep.Skipped = append(rep.Skipped, Skipped{Step: ref.Step, Dir: ref.Dir, Reason: reason})
			continue
		}
		if !ok {
			a = stepAcc{Step: ref.Step}
		}
		if a.Trajectories != ref.Rows {
			return rep, fmt.Errorf("step %d (%s): %d trajectories carry this step number but the manifest commits %d rows (the shards' step column disagrees with their directory; rewrite the step)", ref.Step, ref.Dir, a.Trajectories, ref.Rows)
		}
		m := finalize(a)
		if a.Trajectories == 0 {
			m.PolicyVersion = ref.PolicyVersion
		}
		m.Mismatch = ref.Mismatch
		m.Learner = ref.Learner
		rep.Steps = append(rep.Steps, m)
	}
	sort.Slice(rep.Skipped, func(i, j int) bool { return rep.Skipped[i].Step < rep.Skipped[j].Step })
	if len(byStep) > 0 {
		var stray []string
		for k, a := range byStep {
			stray = append(stray, fmt.Sprintf("step %d (%d trajectories)", k, a.Trajectories))
		}
		sort.Strings(stray)
		return rep, fmt.Errorf("trajectories of steps outside the committed ones were read: %s (a shard holds rows of another step; rewrite it)", strings.Join(stray, ", "))
	}
	if len(rep.Steps) == 0 && len(bad) > 0 {
		return rep, fmt.Errorf("no step of %s could be read: shard %s: %s (%d unreadable shards in all; rewrite the steps, or choose others with --steps)", plan.Run, bad[0].Shard, bad[0].Reason, len(bad))
	}
	return rep, nil
}

// writeReport writes the report of the accumulators into out.
//
// Input: PCollection<stepAcc>, one per step; PCollection<UnreadableShard>.
func writeReport(s beam.Scope, plan Plan, out string, heldout []records.BenchmarkEval, accs, bad beam.PCollection) {
	s = s.Scope("analytics.WriteReport")
	beam.ParDo0(s, &writeReportFn{Out: out, Plan: plan, Heldout: heldout}, beam.Impulse(s), beam.SideInput{Input: accs}, beam.SideInput{Input: bad})
}

// writeReportFn gathers the per-step accumulators (one small value per step)
// and the unreadable shards, and writes analysis.json, analysis.md and the
// plots.
type writeReportFn struct {
	Out     string                  `json:"out"`
	Plan    Plan                    `json:"plan"`
	Heldout []records.BenchmarkEval `json:"heldout"`
}

func (f *writeReportFn) ProcessElement(ctx context.Context, _ []byte, iter func(*stepAcc) bool, badIter func(*UnreadableShard) bool) error {
	var accs []stepAcc
	var a stepAcc
	for iter(&a) {
		accs = append(accs, a)
		a = stepAcc{}
	}
	var bad []UnreadableShard
	var u UnreadableShard
	for badIter(&u) {
		bad = append(bad, u)
	}
	rep, err := BuildReport(f.Plan, accs, bad)
	if err != nil {
		return err
	}
	rep.Heldout = f.Heldout
	return WriteReport(ctx, f.Out, rep)
}

// WriteReport writes rep into dir as JSON, Markdown and PNG plots.
func WriteReport(ctx context.Context, dir string, rep Report) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", JSONName, err)
	}
	files := map[string][]byte{
		JSONName:     append(js, '\n'),
		MarkdownName: []byte(Markdown(rep)),
	}
	plots, err := Plots(rep)
	if err != nil {
		return err
	}
	for name, b := range plots {
		files[name] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := storage.Join(dir, n)
		if err := storage.WriteAtomic(ctx, p, files[n]); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// writeLearner writes the learner's table: one row per step it trained on,
// the figures of learner.png.
func writeLearner(b *bytes.Buffer, steps []StepMetrics) {
	var learned []StepMetrics
	for _, m := range steps {
		if m.Learner != nil {
			learned = append(learned, m)
		}
	}
	if len(learned) == 0 {
		return
	}
	b.WriteString("\n## Learner\n\nThe learner's record of its update on each step's trajectories (definitions: the analytics package\ndocumentation, LearnerMetrics).\n\n![learner](" + LearnerPNG + ")\n\n")
	b.WriteString("| step | loss | grad norm | lr | KL to pi_old | KL to ref | clipped low / high / dual | external prob | external under omega |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range learned {
		l := m.Learner
		f := func(k string) string {
			v, ok := l.Metrics[k]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.4g", v)
		}
		fmt.Fprintf(b, "| %d | %.4g | %.4g | %.3g | %s | %s | %s / %s / %s | %s | %s |\n", m.Step, l.Loss, l.GradNorm, l.LR,
			f("approx_kl_old"), f("kl_ref"), f("clip_frac_low"), f("clip_frac_high"), f("clip_frac_dual"), f("ext_prob_mean"), f("ext_under_omega_frac"))
	}
}

// Markdown renders the report: a summary table over the steps, then one
// table per step with every metric.
func Markdown(rep Report) string {
	var b bytes.Buffer
	writeSummary(&b, rep)
	mismatchTable(&b, rep.Steps)
	writeLearner(&b, rep.Steps)
	for _, m := range rep.Steps {
		writeStepTable(&b, m)
	}
	writeUnreadable(&b, rep.Unreadable)
	b.WriteString(heldoutMarkdown(rep.Heldout))
	writeSkipped(&b, rep.Skipped)
	return b.String()
}

// writeSummary writes the report's title, what it covers, its plot and the
// summary table: one row per step.
func writeSummary(b *bytes.Buffer, rep Report) {
	fmt.Fprintf(b, "# Training dynamics of %s\n\n", rep.Run)
	fmt.Fprintf(b, "%d committed steps analysed", len(rep.Steps))
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(b, ", %d skipped", len(rep.Skipped))
	}
	b.WriteString(". Definitions: see the analytics package documentation; ratios with an empty denominator are 0.\n\n")
	b.WriteString("![dynamics](dynamics.png)\n\n## Summary\n\n")
	b.WriteString("| step | trajectories | prompts | accuracy | failed tasks | solved-all tasks | interactions/traj | external tokens | response len p50/p95 | latency ms p50/p95 | error rate | noisy docs | mean reward |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range rep.Steps {
		fmt.Fprintf(b, "| %d | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %g / %g | %.1f / %.1f | %.3f | %.3f | %.3f |\n",
			m.Step, m.Trajectories, m.Prompts, m.Accuracy, m.FailedTasks, m.SolvedAllTasks,
			m.InteractionsPerTrajectory.Total, m.ExternalTokenShare, m.ResponseLengthP50, m.ResponseLengthP95,
			m.LatencyMsP50, m.LatencyMsP95, m.ErrorRate, m.NoisyDocShare, m.MeanReward)
	}
}

// metricRows writes the rows of a step's metric table.
type metricRows struct{ b *bytes.Buffer }

// row writes one metric, its value v written with format.
func (t metricRows) row(name, format string, v any) {
	fmt.Fprintf(t.b, "| %s | "+format+" |\n", name, v)
}

// writeStepTable writes the table of every metric of one step.
func writeStepTable(b *bytes.Buffer, m StepMetrics) {
	fmt.Fprintf(b, "\n## Step %d\n\n| metric | value |\n|---|---:|\n", m.Step)
	t := metricRows{b}
	t.row("policy version", "%d", m.PolicyVersion)
	t.row("trajectories", "%d", m.Trajectories)
	t.row("prompts", "%d", m.Prompts)
	t.row("batch accuracy", "%.4f", m.Accuracy)
	t.row("failed tasks (all samples wrong)", "%.4f", m.FailedTasks)
	t.row("solved-all tasks", "%.4f", m.SolvedAllTasks)
	t.row("mean reward", "%.4f", m.MeanReward)
	t.row("interactions / trajectory", "%.4f", m.InteractionsPerTrajectory.Total)
	t.row("verify / trajectory", "%.4f", m.InteractionsPerTrajectory.Verify)
	t.row("knowledge / trajectory", "%.4f", m.InteractionsPerTrajectory.Knowledge)
	t.row("reason / trajectory", "%.4f", m.InteractionsPerTrajectory.Reason)
	if m.InteractionsPerTrajectory.Other > 0 {
		t.row("other agents / trajectory", "%.4f", m.InteractionsPerTrajectory.Other)
	}
	t.row("response tokens", "%d", m.ResponseTokens)
	t.row("external token share", "%.4f", m.ExternalTokenShare)
	t.row("external share: verify", "%.4f", m.ExternalTokenShareByAgent.Verify)
	t.row("external share: knowledge", "%.4f", m.ExternalTokenShareByAgent.Knowledge)
	t.row("external share: reason", "%.4f", m.ExternalTokenShareByAgent.Reason)
	t.row("template token share", "%.4f", m.TemplateTokenShare)
	t.row("response length p50 (tokens)", "%g", m.ResponseLengthP50)
	t.row("response length p95 (tokens)", "%g", m.ResponseLengthP95)
	t.row("finished by length budget", "%.4f", m.LengthFinishShare)
	t.row("collaborator calls", "%d", m.CollaboratorCalls)
	t.row("latency p50 (ms)", "%.1f", m.LatencyMsP50)
	t.row("latency p95 (ms)", "%.1f", m.LatencyMsP95)
	t.row("error rate", "%.4f", m.ErrorRate)
	t.row("status ok / error / timeout / limit / other", "%s", fmt.Sprintf("%d / %d / %d / %d / %d", m.Status.OK, m.Status.Error, m.Status.Timeout, m.Status.Limit, m.Status.Other))
	t.row("knowledge answers", "%d", m.KnowledgeAnswers)
	t.row("noisy document share", "%.4f", m.NoisyDocShare)
	if len(m.PolicyVersionTokens) > 0 {
		t.row("policy tokens by version", "%s", versionMix(m.PolicyVersionTokens))
		t.row("samples of more than one version", "%d", m.MixedSamples)
	}
	if m.Mismatch != nil {
		t.mismatch(m.Mismatch)
	}
	if m.Learner != nil {
		t.learner(m.Learner)
	}
}

// mismatch writes a step's train-inference mismatch rows.
func (t metricRows) mismatch(mm *Mismatch) {
	t.row("policy tokens compared with the sampler", "%d", mm.Tokens)
	t.row("train-inference |delta log p| mean", "%.3g", mm.AbsMean)
	t.row("train-inference |delta log p| max", "%.3g", mm.AbsMax)
	t.row("train-inference KL (k1 / k3)", "%s", fmt.Sprintf("%.3g / %.3g", mm.KL, mm.KLK3))
	lags := make([]string, 0, len(mm.ByLag))
	for k := range mm.ByLag {
		lags = append(lags, k)
	}
	sort.Slice(lags, func(i, j int) bool {
		return len(lags[i]) < len(lags[j]) || len(lags[i]) == len(lags[j]) && lags[i] < lags[j]
	})
	for _, k := range lags {
		l := mm.ByLag[k]
		t.row("train-inference at version lag "+k+": tokens, |delta log p| mean, KL k3", "%s", fmt.Sprintf("%d, %.3g, %.3g", l.Tokens, l.AbsMean, l.KLK3))
	}
	if mm.Corrected {
		t.row("rollout IS weight mean", "%.4f", mm.ISWeightMean)
		t.row("rollout IS above cap / below 1/cap / masked", "%s", fmt.Sprintf("%.4f / %.4f / %.4f", mm.ISFracHigh, mm.ISFracLow, mm.ISMaskedFrac))
	}
}

// learner writes a step's learner rows, its metrics in name order.
func (t metricRows) learner(l *LearnerMetrics) {
	t.row("learner loss", "%.6g", l.Loss)
	t.row("learner gradient norm", "%.6g", l.GradNorm)
	t.row("learning rate", "%.6g", l.LR)
	t.row("learner tokens", "%d", l.Tokens)
	keys := make([]string, 0, len(l.Metrics))
	for k := range l.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.row("learner "+k, "%.6g", l.Metrics[k])
	}
}

// writeUnreadable writes the table of shards that could not be read.
func writeUnreadable(b *bytes.Buffer, unreadable []UnreadableShard) {
	if len(unreadable) == 0 {
		return
	}
	b.WriteString("\n## Unreadable shards\n\n| step | shard | reason |\n|---:|---|---|\n")
	for _, u := range unreadable {
		fmt.Fprintf(b, "| %d | %s | %s |\n", u.Step, u.Shard, strings.ReplaceAll(u.Reason, "|", "\\|"))
	}
}

// writeSkipped writes the table of step directories not analysed.
func writeSkipped(b *bytes.Buffer, skipped []Skipped) {
	if len(skipped) == 0 {
		return
	}
	b.WriteString("\n## Skipped step directories\n\n| step | directory | reason |\n|---:|---|---|\n")
	for _, sk := range skipped {
		fmt.Fprintf(b, "| %d | %s | %s |\n", sk.Step, sk.Dir, sk.Reason)
	}
}

// mismatchTable writes the train-inference mismatch of the steps that have
// a learner measurement, one row per step, with its plot.
func mismatchTable(b *bytes.Buffer, steps []StepMetrics) {
	n := 0
	for _, m := range steps {
		if m.Mismatch != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	b.WriteString("\n## Train-inference mismatch\n\n")
	b.WriteString("The learner's log-probabilities of the policy's own tokens against the sampler's (behavior_logprobs), from the learner's records; KL estimates of KL(sampler || learner). The IS columns are set when the step trained with learner.loss.rollout_correction.\n\n")
	fmt.Fprintf(b, "![mismatch](%s)\n\n", MismatchPNG)
	b.WriteString("| step | policy tokens | mean abs delta | max abs delta | KL k1 | KL k3 | IS weight mean | IS above cap | IS masked |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range steps {
		mm := m.Mismatch
		if mm == nil {
			continue
		}
		is := "- | - | -"
		if mm.Corrected {
			is = fmt.Sprintf("%.4f | %.4f | %.4f", mm.ISWeightMean, mm.ISFracHigh, mm.ISMaskedFrac)
		}
		fmt.Fprintf(b, "| %d | %d | %.3g | %.3g | %.3g | %.3g | %s |\n", m.Step, mm.Tokens, mm.AbsMean, mm.AbsMax, mm.KL, mm.KLK3, is)
	}
}

// versionMix writes tokens per version as "v: n (share)", in version
// order.
func versionMix(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	total := int64(0)
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Slice(keys, func(i, j int) bool {
		return len(keys[i]) < len(keys[j]) || len(keys[i]) == len(keys[j]) && keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d (%.3f)", k, m[k], float64(m[k])/float64(total))
	}
	return strings.Join(parts, ", ")
}
