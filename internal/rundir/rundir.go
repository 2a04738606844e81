// Package rundir owns the layout of a run directory (<run>/, local or
// gs://): every stage asks it where a step, a checkpoint, a metrics record,
// an evaluation or a dead-letter file lives, and how a step-NNNNNN name
// reads back, instead of formatting paths itself. It also holds the one
// commit protocol of the directory (commit.go): the files of a step, a
// checkpoint or an evaluation listed with their sizes and sha256 in a
// marker written last, verified on read, under the run's lease.
//
// docs/run-directory.md describes the layout; a test checks that every
// path this package produces appears there.
package rundir

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
)

// Names of the entries of a run directory and of its committed
// directories.
const (
	// RunYAMLName is the configuration the run remembers.
	RunYAMLName = "run.yaml"
	// ConfigChangesName logs the changes applied with --reconfigure.
	ConfigChangesName = "config_changes.jsonl"
	// AlgorithmName is the resolved algorithm, beside run.yaml.
	AlgorithmName = "algorithm.yaml"
	// CheckpointsName holds the checkpoints, one step-NNNNNN each.
	CheckpointsName = "checkpoints"
	// MetricsName holds one JSON record per step and kind.
	MetricsName = "metrics"
	// MetricsLogName is every metrics record, one a line, in step order.
	MetricsLogName = "metrics.jsonl"
	// EvalName holds the benchmark evaluations, one step-NNNNNN each.
	EvalName = "eval"
	// EvalSplitsName holds the evaluations on the task's splits
	// (eval.splits), one step-NNNNNN each.
	EvalSplitsName = "evalsplits"
	// DeadLettersName holds the rows a rollout step could not use.
	DeadLettersName = "dead_letters"
	// TensorBoardName holds the TensorBoard event files.
	TensorBoardName = "tensorboard"
	// ReportName holds the demo's report.
	ReportName = "report"
	// AnalysisName holds aipo analyze's output.
	AnalysisName = "analysis"
	// ShardsName is the folder of a step's Parquet shards.
	ShardsName = "shards"
	// CarryName is the folder of a step's carried groups (rollout.carry).
	CarryName = "carry"
	// ManifestName commits a step (or any shard set), written last.
	ManifestName = "_MANIFEST.json"
	// CommittedName commits a checkpoint, written last.
	CommittedName = "_COMMITTED"
	// LeaseName is the run's single-writer lease.
	LeaseName = runlease.Name
)

// Kinds of per-step metrics records (metrics/<kind>-NNNNNN.json).
const (
	// LearnKind is the learner's record of a step.
	LearnKind = "learn"
	// EvalKind is the evaluation of a checkpoint on the splits of the
	// run's task (eval.splits).
	EvalKind = "eval"
	// BenchmarkKind is the evaluation of a checkpoint on eval.benchmarks.
	BenchmarkKind = "evalbench"
)

// stepPrefix starts every step directory's name.
const stepPrefix = "step-"

// StepName is the name of step k's directories: step-<k, at least 6
// digits>.
func StepName(k int64) string { return fmt.Sprintf("%s%06d", stepPrefix, k) }

// StepGlob matches every step directory's name.
const StepGlob = stepPrefix + "*"

// ParseStepName reads the step out of a name StepName wrote. Other names
// (step-7, step-000007.tmp-1, a negative step) are not steps.
func ParseStepName(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, stepPrefix)
	if !ok || s == "" || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	k, err := strconv.ParseInt(s, 10, 64)
	if err != nil || StepName(k) != name {
		return 0, false
	}
	return k, true
}

// Step is the directory of step k's trajectories: <run>/step-NNNNNN.
func Step(run string, k int64) string { return storage.Join(run, StepName(k)) }

// Steps is the glob of every step directory of run.
func Steps(run string) string { return storage.Join(run, StepGlob) }

// Shards is the folder of the Parquet shards of the step (or shard set)
// committed in dir.
func Shards(dir string) string { return storage.Join(dir, ShardsName) }

// Carry is the folder of the groups a step carries into the next one
// (rollout.carry).
func Carry(dir string) string { return storage.Join(dir, CarryName) }

// Manifest is the marker that commits the step (or shard set) in dir.
func Manifest(dir string) string { return storage.Join(dir, ManifestName) }

// Checkpoints is the folder of run's checkpoints.
func Checkpoints(run string) string { return storage.Join(run, CheckpointsName) }

// LoRABase is the directory of a LoRA run's frozen base (learner.lora):
// <run>/lora-base, a committed serving checkpoint that every checkpoint's
// adapter names.
func LoRABase(run string) string { return storage.Join(run, "lora-base") }

// Checkpoint is the directory of run's checkpoint k (the policy after k
// updates): <run>/checkpoints/step-NNNNNN.
func Checkpoint(run string, k int64) string { return CheckpointIn(Checkpoints(run), k) }

// CheckpointIn is checkpoint k's directory under a checkpoints folder
// other than the run's own (policy.sync.checkpoint_dir).
func CheckpointIn(root string, k int64) string { return storage.Join(root, StepName(k)) }

// CheckpointFiles is the glob of the file called name in every checkpoint
// directory of run (CommittedName lists the committed ones).
func CheckpointFiles(run, name string) string {
	return storage.Join(Checkpoints(run), StepGlob, name)
}

// Committed is the marker that commits the checkpoint in dir.
func Committed(dir string) string { return storage.Join(dir, CommittedName) }

// Metrics is the folder of run's per-step metrics records.
func Metrics(run string) string { return storage.Join(run, MetricsName) }

// MetricsRecord is the record of kind (LearnKind, EvalKind,
// BenchmarkKind) for step k: <run>/metrics/<kind>-NNNNNN.json.
func MetricsRecord(run, kind string, k int64) string {
	return storage.Join(Metrics(run), fmt.Sprintf("%s-%06d.json", kind, k))
}

// MetricsRecords is the glob of run's metrics records of kind, or of every
// kind when kind is "".
func MetricsRecords(run, kind string) string {
	if kind == "" {
		return storage.Join(Metrics(run), "*.json")
	}
	return storage.Join(Metrics(run), kind+"-*.json")
}

// MetricsLog is <run>/metrics.jsonl.
func MetricsLog(run string) string { return storage.Join(run, MetricsLogName) }

// Eval is the directory of the benchmark evaluation of checkpoint k:
// <run>/eval/step-NNNNNN.
func Eval(run string, k int64) string { return storage.Join(run, EvalName, StepName(k)) }

// EvalSplits is the directory of the evaluation of checkpoint k on the
// splits of the run's task (eval.splits): <run>/evalsplits/step-NNNNNN.
func EvalSplits(run string, k int64) string { return storage.Join(run, EvalSplitsName, StepName(k)) }

// DeadLetters is the default folder of run's dead-letter files
// (data.dead_letter_dir).
func DeadLetters(run string) string { return storage.Join(run, DeadLettersName) }

// DeadLetter is step k's dead-letter file in the folder dir (the run's
// data.dead_letter_dir): <dir>/step-NNNNNN.jsonl.
func DeadLetter(dir string, k int64) string { return storage.Join(dir, StepName(k)+".jsonl") }

// RunYAML is the configuration run remembers.
func RunYAML(run string) string { return storage.Join(run, RunYAMLName) }

// ConfigChanges is the log of run's --reconfigure changes.
func ConfigChanges(run string) string { return storage.Join(run, ConfigChangesName) }

// Algorithm is run's resolved algorithm.
func Algorithm(run string) string { return storage.Join(run, AlgorithmName) }

// Lease is run's lease file.
func Lease(run string) string { return runlease.Path(run) }

// TensorBoard is the folder of run's TensorBoard event files.
func TensorBoard(run string) string { return storage.Join(run, TensorBoardName) }

// Report is the folder of the demo's report on run.
func Report(run string) string { return storage.Join(run, ReportName) }

// Analysis is the folder aipo analyze writes for run.
func Analysis(run string) string { return storage.Join(run, AnalysisName) }
