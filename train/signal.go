package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/train/samples"
)

// groupSignal counts step trajectories' groups (one per prompt) and those
// with no learning signal. Under an RL objective a group has a signal when
// one of its trainable samples has a non-zero advantage: a group whose
// rewards all tie gives every sample advantage 0, so its tokens move
// nothing but the KL and entropy terms. Under rejection SFT a group has a
// signal when one of its samples is correct. Failed samples carry none.
func groupSignal(trajs []schemas.Trajectory, objective string) (groups, none int) {
	signal := map[string]bool{}
	for _, t := range trajs {
		has := samples.Trainable(t) && t.Advantage != 0
		if objective == runconfig.ObjectiveRejectionSFT {
			has = samples.Trainable(t) && t.Correct
		}
		signal[t.PromptID] = signal[t.PromptID] || has
	}
	for _, s := range signal {
		if !s {
			none++
		}
	}
	return len(signal), none
}

// noSignalAdvice is what to change when groups carry no learning signal.
func noSignalAdvice(cfg runconfig.Config) string {
	advice := "a stronger warm start (aipo train --init with an instruction-tuned or SFT'd model; a random policy solves nothing), a larger rollout.group_size (now %d: more samples per prompt make a right and a wrong one likelier to meet), advantage.dynamic_sampling: true (draws prompts until groups disagree), or easier (or, when every sample is right, harder) data"
	return fmt.Sprintf(advice, cfg.Rollout.GroupSize)
}

// signalWarning is the line aipo train prints after learner step k when
// some of its groups had no learning signal ("" when every group had one,
// or the record predates the count).
func signalWarning(cfg runconfig.Config, m records.Learn) string {
	if m.Groups == 0 || m.GroupsNoSignal == 0 {
		return ""
	}
	if m.GroupsNoSignal == m.Groups {
		return fmt.Sprintf("warning: step %d had no learning signal: in all %d groups the samples' rewards tied (every advantage 0), so the step moved the policy by its KL and entropy terms at most; to fix, try %s",
			m.Step, m.Groups, noSignalAdvice(cfg))
	}
	return fmt.Sprintf("warning: step %d: %d of %d groups (%.0f%%) had no learning signal (their samples' rewards tied, every advantage 0)",
		m.Step, m.GroupsNoSignal, m.Groups, 100*float64(m.GroupsNoSignal)/float64(m.Groups))
}

// ErrNoSignal is in the error of a run none of whose steps had a learning
// signal.
var ErrNoSignal = errors.New("no step of the run had a learning signal")

// checkSignal fails a run whose every learner step is recorded and had no
// learning signal in any group: it trained on nothing, and exiting 0 would
// pass it off as a result. Records written before groups were counted
// (Groups 0) count as having had a signal.
func checkSignal(ctx context.Context, cfg runconfig.Config) error {
	steps := cfg.Run.Steps
	if cfg.Run.AllowNoSignal {
		return nil
	}
	groups := 0
	for k := range steps {
		// A step without a readable record (an older layout) leaves
		// nothing to judge.
		m, err := readLearnRecord(ctx, cfg.Run.Dir, k)
		if err != nil || m.Groups == 0 || m.GroupsNoSignal < m.Groups {
			return nil
		}
		groups += m.Groups
	}
	if steps == 0 {
		return nil
	}
	return fmt.Errorf("train: %w: in every one of the %d steps (%d groups in all) the samples of each group got the same reward, so every advantage was 0 and the checkpoints in %s differ from the initial policy by the KL and entropy terms at most. Try %s; then train again in a new run directory (or, for a smoke run of the plumbing, set run.allow_no_signal: true)",
		ErrNoSignal, steps, groups, rundir.Checkpoints(cfg.Run.Dir), noSignalAdvice(cfg))
}
