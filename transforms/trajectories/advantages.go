package trajectories

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/advantage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Advantages computes each group's advantages (see the package doc) and
// emits the trajectories to keep, plus one Stats per group.
//
//	PCollection<Group> -> PCollection<schemas.Trajectory>, PCollection<Stats>
func Advantages(s beam.Scope, spec Spec, groups beam.PCollection) (trajectories, stats beam.PCollection) {
	s = s.Scope("rollout.Advantages")
	return beam.ParDo2(s, &advantageFn{Spec: spec}, groups)
}

type advantageFn struct {
	Spec Spec `json:"spec"`
}

func (f *advantageFn) ProcessElement(ctx context.Context, g Group, emit func(schemas.Trajectory), stats func(Stats)) error {
	if g.Carried != "" {
		// rollout.carry: written under the step's carry directory before
		// the step's manifest (which waits for every group's Stats).
		if err := writeCarried(ctx, f.Spec.Carry.Dir, g); err != nil {
			return err
		}
		stats(Stats{Counts: map[string]int64{"groups_carried": 1}})
		return nil
	}
	keep, err := GroupAdvantages(f.Spec.Advantage, g.Trajectories)
	if err != nil {
		return fmt.Errorf("rollout: prompt %s: %w", g.Prompt.ID, err)
	}
	st := GroupStats(g, keep)
	if keep {
		for _, t := range g.Trajectories {
			emit(t)
		}
	}
	stats(st)
	return nil
}

// GroupAdvantages sets the advantages of one group's trajectories in place:
// cfg's method over the rewards of the trajectories that did not fail;
// failed ones get 0. It reports whether the group is kept (always, unless
// dynamic sampling drops it because those rewards are all equal).
func GroupAdvantages(cfg advantage.Config, ts []schemas.Trajectory) (bool, error) {
	var rewards []float32
	var idx []int
	for i := range ts {
		ts[i].Advantage = 0
		if ts[i].FinishReason != schemas.FinishError {
			rewards = append(rewards, ts[i].Reward)
			idx = append(idx, i)
		}
	}
	if cfg.DynamicSampling && advantage.AllEqual(rewards) {
		return false, nil
	}
	if len(rewards) == 0 {
		return true, nil
	}
	adv, err := cfg.Advantages(rewards)
	if err != nil {
		return false, err
	}
	for k, i := range idx {
		ts[i].Advantage = adv[k]
	}
	return true, nil
}
