package records

import "time"

// Progress is one progress report of a training run (train.Event): the
// phase it entered at a step, or the record a phase finished with.
type Progress struct {
	Step, Steps int64
	Phase       string // "rollout", "learn", "eval", "done"
	Learn       *Learn
	Eval        *Eval
	Benchmarks  *BenchmarkEval // eval.benchmarks' scores
	Elapsed     time.Duration
}
