// Package samples turns a step's trajectories into the learner's samples:
// which tokens each loss term trains (by who wrote them), the fixed order
// that keeps an update independent of the shard layout, Expert
// Iteration's rejection batch, and the sampler's log-probs for the
// train-inference mismatch.
package samples

import (
	"fmt"
	"sort"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// Sources maps a trajectory's token sources to the loss treatment: policy
// tokens are internal, collaborator tokens external, template tokens as the
// configuration says.
func Sources(ts []int8, templateTokens string) ([]loss.Source, error) {
	out := make([]loss.Source, len(ts))
	for i, s := range ts {
		switch s {
		case schemas.SourcePolicy:
			out[i] = loss.Internal
		case schemas.SourceVerify, schemas.SourceKnowledge, schemas.SourceReason, schemas.SourceGuide:
			// Collaborators' answers and guidance traces: tokens the
			// policy did not sample (learner.loss.external decides how
			// they are trained).
			out[i] = loss.External
		case schemas.SourceTemplate:
			if templateTokens == runconfig.TemplateExternal {
				out[i] = loss.External
			} else {
				out[i] = loss.Untrained
			}
		default:
			return nil, fmt.Errorf("token %d has unknown source %d", i, s)
		}
	}
	return out, nil
}

// Trainable reports whether a trajectory can be learned from: it did not
// fail and has a prompt and a response.
func Trainable(t schemas.Trajectory) bool {
	return t.FinishReason != schemas.FinishError && len(t.ResponseIDs) > 0 && len(t.PromptIDs) > 0
}

// Of turns a step's trajectories into learner samples, in a fixed
// order (prompt id, sample index) so that the update does not depend on
// shard layout. Trajectories that failed or have no response are skipped.
func Of(trajs []schemas.Trajectory, templateTokens string) ([]trainer.RLSample, int, error) {
	sort.SliceStable(trajs, func(i, j int) bool {
		if trajs[i].PromptID != trajs[j].PromptID {
			return trajs[i].PromptID < trajs[j].PromptID
		}
		return trajs[i].SampleIndex < trajs[j].SampleIndex
	})
	var out []trainer.RLSample
	skipped := 0
	for _, t := range trajs {
		if !Trainable(t) {
			skipped++
			continue
		}
		src, err := Sources(t.TokenSource, templateTokens)
		if err != nil {
			return nil, 0, fmt.Errorf("trajectory %s/%d: %w", t.PromptID, t.SampleIndex, err)
		}
		out = append(out, trainer.RLSample{
			Sequence:  trainer.Sequence{Prompt: t.PromptIDs, Response: t.ResponseIDs},
			Source:    src,
			Advantage: t.Advantage,
		})
	}
	return out, skipped, nil
}

// Rejection turns a step's trajectories into the SFT batch of Expert
// Iteration: the correct ones only, each distinct response once per
// prompt, in the same fixed order as Of. Tokens that the loss would
// not train (template tokens under "untrained") are context only. It
// returns the sequences and the number of trajectories left out.
func Rejection(trajs []schemas.Trajectory, templateTokens string) ([]trainer.Sequence, int, error) {
	samples, skipped, err := Of(trajs, templateTokens)
	if err != nil {
		return nil, 0, err
	}
	// Of sorted trajs in place and kept the trainable ones in order.
	var kept []schemas.Trajectory
	for _, t := range trajs {
		if Trainable(t) {
			kept = append(kept, t)
		}
	}
	seen := map[string]bool{}
	var out []trainer.Sequence
	for i, s := range samples {
		t := kept[i]
		key := fmt.Sprint(t.PromptID, s.Sequence.Response)
		if !t.Correct || seen[key] {
			skipped++
			continue
		}
		seen[key] = true
		seq := s.Sequence
		seq.Skip = make([]bool, len(seq.Response))
		for j, src := range s.Source {
			seq.Skip[j] = src == loss.Untrained
		}
		out = append(out, seq)
	}
	return out, skipped, nil
}
