package rundir

import (
	"fmt"
	"strings"
)

// Entry is one path of the run directory, as docs/run-directory.md lists
// it.
type Entry struct {
	// Path is the path the function Func produces, with <run> for the run
	// directory, NNNNNN for a step and <kind> or <dir> for the other
	// arguments.
	Path string
	// Func is the function of this package that produces Path.
	Func string
	// Writer names the stage that writes it; What says what it holds.
	Writer, What string
}

// placeholder stands for a step in Layout's paths: StepName(placeholder)
// is then rewritten to step-NNNNNN.
const placeholder = 424242

// Layout is every path of a run directory that this package produces,
// in the order docs/run-directory.md lists them.
func Layout() []Entry {
	const run = "<run>"
	k := int64(placeholder)
	step := Step(run, k)
	ck := Checkpoint(run, k)
	es := []Entry{
		{RunYAML(run), "RunYAML", "aipo train, aipo demo", "the configuration the run started with, `--set` overrides applied (changed only with --reconfigure)"},
		{ConfigChanges(run), "ConfigChanges", "aipo train --reconfigure", "one JSON line per applied change: the step it applies from, the fields, the run.yaml before it"},
		{Algorithm(run), "Algorithm", "aipo train, aipo demo", "the resolved algorithm (preset and every algorithm field)"},
		{Lease(run), "Lease", "the command that owns the run (aipo train, learn, rollout, demo)", "the single-writer lease, renewed while the command runs"},
		{Steps(run), "Steps", "", "glob of the step directories"},
		{step, "Step", "the rollout pipeline", "the trajectories sampled from checkpoint NNNNNN"},
		{Shards(step), "Shards", "the rollout pipeline", "the step's Parquet shards (part-*.parquet)"},
		{Carry(step), "Carry", "the rollout pipeline (rollout.carry)", "the groups the step's batch closed without, one JSON file each (a prompt, its samples' tokens, log-probs and versions so far): the next step's rollout finishes and trains them; complete once the manifest is written, which counts them (groups_carried)"},
		{Manifest(step), "Manifest", "the rollout pipeline", "commits the step: every shard with rows, bytes and sha256, the step statistics in meta; written last"},
		{Checkpoints(run), "Checkpoints", "", "the checkpoints"},
		{ck, "Checkpoint", "aipo train / aipo learn (step 0: --init or the demo's warm start)", "the policy after NNNNNN updates (Hugging Face layout plus optimizer.bin or its parts, master.safetensors, trainer_state.json)"},
		{LoRABase(run), "LoRABase", "aipo train --init with learner.lora", "a LoRA run's frozen base (a serving checkpoint: config.json, the weights in their dtype, the tokenizer files), written once; the run's checkpoints are then PEFT adapter directories naming it (docs/lora.md)"},
		{CheckpointIn("<dir>", k), "CheckpointIn", "aipo train", "checkpoint NNNNNN as the policy servers see it, under policy.sync.checkpoint_dir"},
		{CheckpointFiles(run, "<name>"), "CheckpointFiles", "", "glob of one file in every checkpoint directory"},
		{Committed(ck), "Committed", "aipo train / aipo learn", "commits the checkpoint: every file with bytes and sha256; written last"},
		{Metrics(run), "Metrics", "", "the per-step metrics records"},
		{MetricsRecord(run, LearnKind, k), "MetricsRecord", "aipo train / aipo learn", "the learner's record of step NNNNNN (LearnRecord)"},
		{MetricsRecord(run, EvalKind, k), "MetricsRecord", "aipo train, aipo demo", "the evaluation of checkpoint NNNNNN on the splits of the run's task, eval.splits (records.Eval)"},
		{MetricsRecord(run, BenchmarkKind, k), "MetricsRecord", "aipo train", "the evaluation of checkpoint NNNNNN on eval.benchmarks (BenchmarkEvalRecord)"},
		{MetricsRecords(run, "<kind>"), "MetricsRecords", "", "glob of the records of one kind (of every kind: metrics/*.json)"},
		{MetricsLog(run), "MetricsLog", "aipo train", "every metrics record, one a line, in step order (learn before eval), rebuilt after each step"},
		{Eval(run, k), "Eval", "aipo train (the eval pipeline)", "the eval pipeline's records and report for checkpoint NNNNNN, committed chunk by chunk with manifests"},
		{EvalSplits(run, k), "EvalSplits", "aipo train, aipo demo (the eval pipeline)", "the eval pipeline's records and report of checkpoint NNNNNN on eval.splits, one benchmark a split"},
		{DeadLetters(run), "DeadLetters", "the rollout pipeline", "default data.dead_letter_dir"},
		{DeadLetter("<dir>", k), "DeadLetter", "the rollout pipeline", "the prompt rows of step NNNNNN that could not be used, one JSON line each saying why"},
		{TensorBoard(run), "TensorBoard", "aipo train", "TensorBoard event files, rebuilt from metrics/"},
		{Report(run), "Report", "aipo demo", "the demo's report (and aipo demo --compare's)"},
		{Analysis(run), "Analysis", "aipo analyze", "the analytics report"},
	}
	for i := range es {
		es[i].Path = strings.ReplaceAll(es[i].Path, StepName(k), "step-NNNNNN")
		es[i].Path = strings.ReplaceAll(es[i].Path, fmt.Sprintf("%06d", k), "NNNNNN")
	}
	return es
}

// LayoutMarkdown is the table of docs/run-directory.md: one row per
// Layout entry.
func LayoutMarkdown() string {
	var b strings.Builder
	b.WriteString("| Path | Written by | Holds | rundir |\n|---|---|---|---|\n")
	for _, e := range Layout() {
		w := e.Writer
		if w == "" {
			w = "-"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` |\n", e.Path, w, e.What, e.Func)
	}
	return b.String()
}
