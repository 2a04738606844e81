//go:build tensorboard

package tensorboard_test

import (
	"context"
	"testing"

	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/records/tensorboard"
	"github.com/aipo-rl/aipo/records/tensorboard/tbtest"
)

// TensorBoard's own reader (scripts/pychecks.sh's environment) finds the
// board's scalars: every record's, once, at its step, and the headline
// figures by name; two learner steps make two points of train/loss.
func TestTensorBoardReadsTheBoard(t *testing.T) {
	run := t.TempDir()
	for k := range int64(2) {
		commitCheckpoint(t, run, k+1)
		writeRecord(t, run, "learn", k, boardLearnRecord(k))
	}
	writeRecord(t, run, "eval", 0, records.Eval{Kind: "eval", Step: 0, Splits: []records.SplitScore{{Split: "unseen", Greedy: 0.25, AvgK: 0.125, PassK: 0.5}}})
	writeRecord(t, run, "evalbench", 1, records.BenchmarkEval{Kind: records.HeldoutKind, Step: 1,
		Benchmarks: []records.HeldoutScore{{Name: "aime24", Avg: 0.1, Pass: map[string]float64{"1": 0.1, "4": 0.3}}}})
	var notes []string
	tensorboard.Open(run, func(s string) { notes = append(notes, s) }).Sync(context.Background())
	if len(notes) > 0 {
		t.Fatalf("the board could not write: %q", notes)
	}
	tbtest.CheckWithTensorBoard(t, run, map[string]int{"train/loss": 2})
}
