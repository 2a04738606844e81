package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.DoFn3x1[context.Context, []byte, func(*stepAcc) bool, error](&writeReportFn{})
	register.Iter1[stepAcc]()
}

// Report is the content of analysis.json.
type Report struct {
	Run     string        `json:"run"`
	Steps   []StepMetrics `json:"steps"`
	Skipped []Skipped     `json:"skipped,omitempty"`
}

// File names written into the output directory.
const (
	JSONName     = "analysis.json"
	MarkdownName = "analysis.md"
)

// BuildReport turns the per-step accumulators into the report. Every
// committed step of the plan gets an entry (a step with no rows gets zero
// metrics), and each step's trajectory count must equal its manifest's row
// count.
func BuildReport(plan Plan, accs []stepAcc) (Report, error) {
	byStep := map[int64]stepAcc{}
	for _, a := range accs {
		if prev, ok := byStep[a.Step]; ok {
			a = merge(prev, a)
		}
		byStep[a.Step] = a
	}
	rep := Report{Run: plan.Run, Skipped: plan.Skipped}
	for _, ref := range plan.Steps {
		a, ok := byStep[ref.Step]
		delete(byStep, ref.Step)
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
		rep.Steps = append(rep.Steps, m)
	}
	if len(byStep) > 0 {
		var stray []string
		for k, a := range byStep {
			stray = append(stray, fmt.Sprintf("step %d (%d trajectories)", k, a.Trajectories))
		}
		sort.Strings(stray)
		return rep, fmt.Errorf("trajectories of steps outside the committed ones were read: %s (a shard holds rows of another step; rewrite it)", strings.Join(stray, ", "))
	}
	return rep, nil
}

// writeReport writes the report of the accumulators into out.
//
// Input: PCollection<stepAcc>, one per step.
func writeReport(s beam.Scope, plan Plan, out string, accs beam.PCollection) {
	s = s.Scope("analytics.WriteReport")
	beam.ParDo0(s, &writeReportFn{Out: out, Plan: plan}, beam.Impulse(s), beam.SideInput{Input: accs})
}

// writeReportFn gathers the per-step accumulators (one small value per step)
// and writes analysis.json, analysis.md and the plots.
type writeReportFn struct {
	Out  string `json:"out"`
	Plan Plan   `json:"plan"`
}

func (f *writeReportFn) ProcessElement(ctx context.Context, _ []byte, iter func(*stepAcc) bool) error {
	var accs []stepAcc
	var a stepAcc
	for iter(&a) {
		accs = append(accs, a)
		a = stepAcc{}
	}
	rep, err := BuildReport(f.Plan, accs)
	if err != nil {
		return err
	}
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

// Markdown renders the report: a summary table over the steps, then one
// table per step with every metric.
func Markdown(rep Report) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Training dynamics of %s\n\n", rep.Run)
	fmt.Fprintf(&b, "%d committed steps analysed", len(rep.Steps))
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(&b, ", %d skipped", len(rep.Skipped))
	}
	b.WriteString(". Definitions: see the analytics package documentation; ratios with an empty denominator are 0.\n\n")
	b.WriteString("![dynamics](dynamics.png)\n\n## Summary\n\n")
	b.WriteString("| step | trajectories | prompts | accuracy | failed tasks | solved-all tasks | interactions/traj | external tokens | response len p50/p95 | latency ms p50/p95 | error rate | noisy docs | mean reward |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range rep.Steps {
		fmt.Fprintf(&b, "| %d | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %g / %g | %.1f / %.1f | %.3f | %.3f | %.3f |\n",
			m.Step, m.Trajectories, m.Prompts, m.Accuracy, m.FailedTasks, m.SolvedAllTasks,
			m.InteractionsPerTrajectory.Total, m.ExternalTokenShare, m.ResponseLengthP50, m.ResponseLengthP95,
			m.LatencyMsP50, m.LatencyMsP95, m.ErrorRate, m.NoisyDocShare, m.MeanReward)
	}
	mismatchTable(&b, rep.Steps)
	for _, m := range rep.Steps {
		fmt.Fprintf(&b, "\n## Step %d\n\n| metric | value |\n|---|---:|\n", m.Step)
		row := func(name, format string, v any) { fmt.Fprintf(&b, "| %s | "+format+" |\n", name, v) }
		row("policy version", "%d", m.PolicyVersion)
		row("trajectories", "%d", m.Trajectories)
		row("prompts", "%d", m.Prompts)
		row("batch accuracy", "%.4f", m.Accuracy)
		row("failed tasks (all samples wrong)", "%.4f", m.FailedTasks)
		row("solved-all tasks", "%.4f", m.SolvedAllTasks)
		row("mean reward", "%.4f", m.MeanReward)
		row("interactions / trajectory", "%.4f", m.InteractionsPerTrajectory.Total)
		row("verify / trajectory", "%.4f", m.InteractionsPerTrajectory.Verify)
		row("knowledge / trajectory", "%.4f", m.InteractionsPerTrajectory.Knowledge)
		row("reason / trajectory", "%.4f", m.InteractionsPerTrajectory.Reason)
		if m.InteractionsPerTrajectory.Other > 0 {
			row("other agents / trajectory", "%.4f", m.InteractionsPerTrajectory.Other)
		}
		row("response tokens", "%d", m.ResponseTokens)
		row("external token share", "%.4f", m.ExternalTokenShare)
		row("external share: verify", "%.4f", m.ExternalTokenShareByAgent.Verify)
		row("external share: knowledge", "%.4f", m.ExternalTokenShareByAgent.Knowledge)
		row("external share: reason", "%.4f", m.ExternalTokenShareByAgent.Reason)
		row("template token share", "%.4f", m.TemplateTokenShare)
		row("response length p50 (tokens)", "%g", m.ResponseLengthP50)
		row("response length p95 (tokens)", "%g", m.ResponseLengthP95)
		row("finished by length budget", "%.4f", m.LengthFinishShare)
		row("collaborator calls", "%d", m.CollaboratorCalls)
		row("latency p50 (ms)", "%.1f", m.LatencyMsP50)
		row("latency p95 (ms)", "%.1f", m.LatencyMsP95)
		row("error rate", "%.4f", m.ErrorRate)
		row("status ok / error / timeout / limit / other", "%s", fmt.Sprintf("%d / %d / %d / %d / %d", m.Status.OK, m.Status.Error, m.Status.Timeout, m.Status.Limit, m.Status.Other))
		row("knowledge answers", "%d", m.KnowledgeAnswers)
		row("noisy document share", "%.4f", m.NoisyDocShare)
		if mm := m.Mismatch; mm != nil {
			row("policy tokens compared with the sampler", "%d", mm.Tokens)
			row("train-inference |delta log p| mean", "%.3g", mm.AbsMean)
			row("train-inference |delta log p| max", "%.3g", mm.AbsMax)
			row("train-inference KL (k1 / k3)", "%s", fmt.Sprintf("%.3g / %.3g", mm.KL, mm.KLK3))
			if mm.Corrected {
				row("rollout IS weight mean", "%.4f", mm.ISWeightMean)
				row("rollout IS above cap / below 1/cap / masked", "%s", fmt.Sprintf("%.4f / %.4f / %.4f", mm.ISFracHigh, mm.ISFracLow, mm.ISMaskedFrac))
			}
		}
	}
	if len(rep.Skipped) > 0 {
		b.WriteString("\n## Skipped step directories\n\n| step | directory | reason |\n|---:|---|---|\n")
		for _, sk := range rep.Skipped {
			fmt.Fprintf(&b, "| %d | %s | %s |\n", sk.Step, sk.Dir, sk.Reason)
		}
	}
	return b.String()
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
