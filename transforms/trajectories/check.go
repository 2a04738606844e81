package trajectories

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// StepCheck says what a step must have before its manifest is committed.
type StepCheck struct {
	Step int64 `json:"step"`
	// Sources names the prompt files (data.sources, comma-separated); empty
	// for the demo task, whose steps always have prompts.
	Sources string `json:"sources"`
	// DeadLetters is where the step's malformed rows are written.
	DeadLetters string `json:"dead_letters"`
	// MaxFailedFraction bounds failed samples / samples.
	MaxFailedFraction float64 `json:"max_failed_fraction"`
}

// Err returns why a step whose statistics are st must not be committed, or
// nil: no prompt row (every row malformed, or no row), every sample
// failed, or more than MaxFailedFraction of them failed.
func (c StepCheck) Err(st records.StepStats) error {
	if st.Prompts == 0 {
		if c.Sources == "" {
			return fmt.Errorf("rollout step %d refused: no prompt to roll out; set data.batch_size to at least 1", c.Step)
		}
		var dead int64
		if st.DeadLetters != nil {
			dead = *st.DeadLetters
		}
		if dead > 0 {
			return fmt.Errorf("rollout step %d refused: no usable prompt in data.sources %s: %d rows read, all %d malformed (dead-lettered to %s, one line each saying why); fix those rows or point data.sources at a file with valid prompts; nothing was committed",
				c.Step, c.Sources, dead, dead, c.DeadLetters)
		}
		return fmt.Errorf("rollout step %d refused: no usable prompt in data.sources %s: 0 rows read (empty files?); add prompts to them or point data.sources at a file with prompts; nothing was committed", c.Step, c.Sources)
	}
	total, failed := st.Trajectories, st.Failed()
	if failed == 0 {
		return nil
	}
	first := st.FirstFailure()
	if failed == total {
		return fmt.Errorf("rollout step %d refused: every sample failed (%d of %d), so there is nothing to train on; the first failure: %s; fix that cause (a prompt longer than the policy's context: shorten rollout.system_prompt or the prompts, or serve a model with a longer context) and run again; nothing was committed",
			c.Step, failed, total, first)
	}
	if frac := float64(failed) / float64(total); frac > c.MaxFailedFraction {
		return fmt.Errorf("rollout step %d refused: %d of %d samples failed (%.1f%%, above rollout.max_failed_fraction %g); the first failure: %s; fix that cause, or raise rollout.max_failed_fraction to train on the samples that did not fail; nothing was committed",
			c.Step, failed, total, 100*frac, c.MaxFailedFraction, first)
	}
	return nil
}

// Refused finds StepCheck's refusal in err, the error of a pipeline run
// that CheckStep failed (runners wrap a DoFn's error in their own report),
// and returns it alone; ok is false when err holds none.
func Refused(err error, step int64) (refusal error, ok bool) {
	if err == nil {
		return nil, false
	}
	text := err.Error()
	i := strings.LastIndex(text, fmt.Sprintf("rollout step %d refused: ", step))
	if i < 0 {
		return nil, false
	}
	text = text[i:]
	if j := strings.IndexByte(text, '\n'); j >= 0 {
		text = text[:j]
	}
	return errors.New(text), true
}

// CheckPassed is records.CheckedMeta's value for a step that passed; any other
// value is the refusal.
const CheckPassed = "passed"

// CheckStep merges a step's meta (DeadLettersMeta and StepMeta outputs)
// into one StepMeta and sets its records.StepStats.Check to CheckPassed, or to
// c.Err's refusal, which the commit (parquetio.RequireMeta(records.CheckedMeta))
// then fails with, writing nothing.
//
//	PCollection<parquetio.StepMeta> -> PCollection<parquetio.StepMeta>
func CheckStep(s beam.Scope, c StepCheck, metas beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.CheckStep")
	return beam.ParDo(s, &checkStepFn{Check: c}, beam.Impulse(s), beam.SideInput{Input: metas})
}

type checkStepFn struct {
	Check StepCheck `json:"check"`
}

func (f *checkStepFn) ProcessElement(_ context.Context, _ []byte, metas func(*parquetio.StepMeta) bool) (parquetio.StepMeta, error) {
	out := parquetio.StepMeta{Meta: map[string]string{}}
	var m parquetio.StepMeta
	for metas(&m) {
		maps.Copy(out.Meta, m.Meta)
		out.PolicyVersion = max(out.PolicyVersion, m.PolicyVersion)
	}
	// The verdict travels to the commit, which refuses with it: failing
	// here instead would race the commit, which a runner may still run
	// (with empty side inputs) and whose error would then be the one shown.
	st, err := records.ReadStepStats(out.Meta)
	if err == nil {
		err = f.Check.Err(st)
	} else {
		err = fmt.Errorf("rollout step %d refused: %w", f.Check.Step, err)
	}
	st.Check = CheckPassed
	if err != nil {
		st.Check = err.Error()
	}
	maps.Copy(out.Meta, st.Meta())
	return out, nil
}
