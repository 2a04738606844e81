package rundir

import (
	"testing"
)

func TestStepNamesRoundTrip(t *testing.T) {
	for _, k := range []int64{0, 7, 999999, 1000000, 123456789} {
		name := StepName(k)
		got, ok := ParseStepName(name)
		if !ok || got != k {
			t.Errorf("ParseStepName(%q) = %d, %v; want %d, true", name, got, ok, k)
		}
	}
	if StepName(7) != "step-000007" {
		t.Errorf("StepName(7) = %q, want step-000007", StepName(7))
	}
	for _, name := range []string{"step-7", "step-", "step-000007.tmp-1", ".step-000007", "step--00001", "step-+00001", "step-00000a", "checkpoint-000007", "step-0000007"} {
		if k, ok := ParseStepName(name); ok {
			t.Errorf("ParseStepName(%q) = %d, true; want not a step", name, k)
		}
	}
}

func TestPathsLocalAndRemote(t *testing.T) {
	cases := []struct{ got, want string }{
		{Step("/r", 7), "/r/step-000007"},
		{Shards(Step("/r", 7)), "/r/step-000007/shards"},
		{Manifest(Step("/r", 7)), "/r/step-000007/_MANIFEST.json"},
		{Checkpoint("/r", 3), "/r/checkpoints/step-000003"},
		{Committed(Checkpoint("/r", 3)), "/r/checkpoints/step-000003/_COMMITTED"},
		{CheckpointFiles("/r", CommittedName), "/r/checkpoints/step-*/_COMMITTED"},
		{MetricsRecord("/r", LearnKind, 2), "/r/metrics/learn-000002.json"},
		{MetricsRecords("/r", BenchmarkKind), "/r/metrics/evalbench-*.json"},
		{MetricsRecords("/r", ""), "/r/metrics/*.json"},
		{MetricsLog("/r"), "/r/metrics.jsonl"},
		{Eval("/r", 4), "/r/eval/step-000004"},
		{DeadLetter(DeadLetters("/r"), 5), "/r/dead_letters/step-000005.jsonl"},
		{RunYAML("/r"), "/r/run.yaml"},
		{Lease("/r"), "/r/_LEASE.json"},
		{Checkpoint("gs://b/r", 1), "gs://b/r/checkpoints/step-000001"},
		{MetricsRecord("gs://b/r/", EvalKind, 1), "gs://b/r/metrics/eval-000001.json"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
