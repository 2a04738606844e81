package trajectories

import (
	"errors"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
)

// The first failure recorded in the step's meta does not depend on the
// order in which groups merge, and a step with no failure records none.
func TestFirstErrorIsOrderFree(t *testing.T) {
	group := func(id string, errs ...string) Group {
		g := Group{Prompt: schemas.Prompt{ID: id}, Errors: errs}
		for _, e := range errs {
			tr := schemas.Trajectory{FinishReason: sampling.FinishStop}
			if e != "" {
				tr.FinishReason = schemas.FinishError
			}
			g.Trajectories = append(g.Trajectories, tr)
		}
		return g
	}
	gs := []Group{group("b", "", "b failed\non two lines"), group("a", "", "", "a failed"), group("c", "", "")}
	var fwd, rev Stats
	for i := range gs {
		fwd.Add(GroupStats(gs[i], true))
		rev.Add(GroupStats(gs[len(gs)-1-i], true))
	}
	f, r := fwd.StepStats().Meta(), rev.StepStats().Meta()
	if f["first_error"] != "prompt a sample 2: a failed" || r["first_error"] != f["first_error"] {
		t.Errorf("first_error %q forwards, %q backwards; want prompt a sample 2: a failed", f["first_error"], r["first_error"])
	}
	if f["policy_errors"] != "2" || f["trajectories"] != "7" {
		t.Errorf("policy_errors %s of %s, want 2 of 7", f["policy_errors"], f["trajectories"])
	}
	var one Stats
	one.Add(GroupStats(gs[0], true))
	if e := one.StepStats().Meta()["first_error"]; e != "prompt b sample 1: b failed on two lines" {
		t.Errorf("first_error %q is not the failure on one line", e)
	}
	var none Stats
	none.Add(GroupStats(gs[2], true))
	if e, ok := none.StepStats().Meta()["first_error"]; ok {
		t.Errorf("first_error %q without a failure", e)
	}
}

// StepCheck's bounds: at the fraction passes, above fails, all failing
// fails whatever the fraction; Refused finds the refusal in a runner's
// wrapped report.
func TestStepCheck(t *testing.T) {
	c := StepCheck{Step: 3, Sources: "p.jsonl", DeadLetters: "dl/step-000003.jsonl", MaxFailedFraction: 0.5}
	meta := func(failed, total int64) records.StepStats {
		return records.StepStats{Prompts: 2, Trajectories: total, Finish: map[string]int64{schemas.FinishError: failed}, FirstError: "prompt x sample 0: boom"}
	}
	if err := c.Err(meta(2, 4)); err != nil {
		t.Errorf("2 of 4 failed under 0.5: %v", err)
	}
	if err := c.Err(meta(0, 4)); err != nil {
		t.Errorf("none failed: %v", err)
	}
	err := c.Err(meta(3, 4))
	if err == nil || !strings.Contains(err.Error(), "3 of 4 samples failed (75.0%, above rollout.max_failed_fraction 0.5); the first failure: prompt x sample 0: boom") {
		t.Errorf("3 of 4 failed under 0.5: %v", err)
	}
	c.MaxFailedFraction = 1
	if err := c.Err(meta(4, 4)); err == nil || !strings.Contains(err.Error(), "every sample failed (4 of 4)") {
		t.Errorf("all failed under 1: %v", err)
	}
	dead := int64(5)
	err = c.Err(records.StepStats{DeadLetters: &dead})
	if err == nil || !strings.Contains(err.Error(), "no usable prompt in data.sources p.jsonl: 5 rows read, all 5 malformed (dead-lettered to dl/step-000003.jsonl") {
		t.Errorf("all rows malformed: %v", err)
	}
	wrapped := errors.New("job failed:\nbundle failed\n\tcaused by:\nDoFn failed:\n" + err.Error() + "\nmore runner text")
	got, ok := Refused(wrapped, 3)
	if !ok || got.Error() != err.Error() {
		t.Errorf("Refused = %v, %v; want %v", got, ok, err)
	}
	if _, ok := Refused(errors.New("rollout step 4 refused: other step"), 3); ok {
		t.Errorf("Refused found step 4's refusal for step 3")
	}
}
