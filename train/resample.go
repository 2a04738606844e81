package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/schemas"
)

// ResampleAttempts bounds how many times aipo train rolls one step out
// again after the learner refused it for the versions that sampled it.
const ResampleAttempts = 3

// run is the loop from step k (run.async picks which), recovering from
// policy servers that lost the weights they were told to serve: when the
// learner refuses a step because older versions sampled some of it (a
// server restarted mid-rollout on its startup weights), the step is
// uncommitted, the servers are told the step's checkpoint again and the
// step is rolled out again, up to ResampleAttempts times a step, before
// the loop goes on. Without policy.sync nothing can be pushed, and the
// refusal stands, as it does for versions newer than the step's.
func (lp *loop) run(ctx context.Context, k int64) error {
	tries := map[int64]int{}
	for {
		var err error
		if lp.cfg.Run.Async {
			err = lp.runAsync(ctx, k)
		} else {
			err = lp.runSync(ctx, k)
		}
		var ve *VersionError
		if err == nil || !lp.pushes() || ctx.Err() != nil || !errors.As(err, &ve) || ve.Newer {
			return err
		}
		if tries[ve.Step] >= ResampleAttempts {
			return fmt.Errorf("%w (aipo train pushed checkpoint %d again and rolled step %d out again %d times, and each time a server answered with other weights: is a server restarting in a loop?)",
				err, lp.sampler(ve.Step), ve.Step, ResampleAttempts)
		}
		tries[ve.Step]++
		if lp.opts.Log != nil {
			lp.opts.Log(fmt.Sprintf("warning: step %d was sampled in part by policy versions %v, not by checkpoint %d: a policy server lost the weights it was told to serve (restarted?); pushing checkpoint %d again and rolling step %d out again (attempt %d of %d)",
				ve.Step, ve.Versions, lp.sampler(ve.Step), lp.sampler(ve.Step), ve.Step, tries[ve.Step], ResampleAttempts))
		}
		if err := runlease.CheckContext(ctx); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		if err := schemas.Uncommit(ctx, rundir.Step(lp.cfg.Run.Dir, ve.Step)); err != nil {
			return fmt.Errorf("train: roll step %d out again: remove its manifest: %w", ve.Step, err)
		}
		lp.opts.Servers.Forget()
		lp.resampled = true
		k = ve.Step
	}
}
