package trajectories

import (
	"fmt"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/verify"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Score sets every trajectory's reward and correctness (see the package
// doc).
//
//	PCollection<Group> -> PCollection<Group>
func Score(s beam.Scope, spec Spec, groups beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Score")
	return beam.ParDo(s, &scoreFn{Spec: spec}, groups)
}

type scoreFn struct {
	Spec Spec `json:"spec"`
}

func (f *scoreFn) ProcessElement(g Group) (Group, error) {
	if g.Carried != "" {
		return g, nil // scored in the step that finishes it
	}
	if err := ScoreGroup(f.Spec, &g); err != nil {
		return Group{}, err
	}
	return g, nil
}

// ScoreGroup sets the rewards of g's trajectories in place.
func ScoreGroup(spec Spec, g *Group) error {
	for i := range g.Trajectories {
		t := &g.Trajectories[i]
		if t.FinishReason == schemas.FinishError {
			t.Reward, t.Correct = 0, false
			continue
		}
		correct, score, err := Verify(spec, g.Prompt, g.PolicyTexts[i])
		if err != nil {
			return err
		}
		// A response the length budget cut off earns nothing unless the
		// run says otherwise: an answer guessed before the budget ran out
		// is not one the policy finished.
		if t.FinishReason == sampling.FinishLength && !spec.ScoreTruncated {
			correct, score = false, 0
		}
		r := score - float32(spec.InteractionCost)*float32(len(t.InteractionAgent))
		t.Reward = spec.Advantage.Shape(r, len(t.ResponseIDs))
		t.Correct = correct
	}
	return nil
}

// Verify scores the text the policy wrote for prompt p.
func Verify(spec Spec, p schemas.Prompt, text string) (bool, float32, error) {
	ds := p.DataSource
	if spec.RewardDataSource != "" {
		ds = spec.RewardDataSource
	}
	v, err := verify.ForTraining(ds, spec.RewardStrict)
	if err != nil {
		return false, 0, fmt.Errorf("rollout: prompt %s: %w (or set reward.data_source)", p.ID, err)
	}
	r := v.Verify(text, p.Answer)
	return r.Correct, r.Score, nil
}
