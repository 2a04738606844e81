package trajectories

import (
	"context"
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// Off-policy guidance (LUFFY, Yan et al. 2025, arXiv:2504.14945): the last
// Spec.Guidance.Traces samples of each group are not sampled from the
// policy but written by someone else, a reference solution of the dataset
// or a teacher model, tokenised with the policy's tokenizer and marked
// schemas.SourceGuide token by token. They are scored and take part in the
// group's advantages like any sample (LUFFY's mixed-policy group), and the
// learner trains their tokens as off-policy (External) tokens, with
// learner.loss.external luffy for LUFFY's policy shaping. Their
// configuration is package guidance's.

// guideText is the trace a prompt's guidance gives, or "" when it has none:
// the reference solution, ending in the answer in the verifier's format
// when the solution alone is not scored correct; or the teacher's answer
// (its call failed: "").
func (f *sampleFn) guideText(ctx context.Context, p schemas.Prompt, j int) (string, error) {
	g := f.Spec.Guidance
	if g.Source == guidance.SourceTeacher {
		a, err := f.w.teacher.Answer(ctx, collab.Query{Agent: collab.Reason, Text: p.Problem, Problem: p.Problem,
			Run: f.Spec.Run, Step: f.Spec.Step, PromptID: p.ID, Sample: j,
			Seed: collab.DeriveSeed(f.Spec.Seed, f.Spec.Step, p.ID, j, -1)})
		if err != nil || a.Status != schemas.StatusOK {
			if err == nil && f.w.teacherWarned.CompareAndSwap(false, true) {
				log.Warnf(ctx, "rollout: the guidance teacher did not answer prompt %s (%s: %s); such samples are drawn from the policy instead (counted as guidance_missing), and this is said once per worker", p.ID, a.Status, a.Text)
			}
			return "", err
		}
		return a.Text, nil
	}
	text := strings.TrimSpace(p.Solution)
	if text == "" {
		return "", nil
	}
	if ok, _, err := Verify(f.Spec, p, text); err == nil && ok {
		return text, nil
	}
	return text + "\n\nThe final answer is $\\boxed{" + strings.TrimSpace(p.Answer) + "}$.", nil
}

// guideTrajectory turns a trace into sample j of prompt p: its text
// tokenised by the policy's tokenizer (special tokens parsed, so that the
// protocol's tags are the tokens the policy writes), ended as the policy
// ends a response (an EOS token unless a stop string closes the text), cut
// to the response budget, every token marked SourceGuide.
// It returns the trajectory and the text it holds.
func (f *sampleFn) guideTrajectory(ctx context.Context, p schemas.Prompt, j int, prompt []int32, text string) (schemas.Trajectory, string, error) {
	ids, err := f.w.client.Tokenize(ctx, text, true)
	if err != nil {
		return schemas.Trajectory{}, "", fmt.Errorf("tokenize the guidance trace of prompt %s: %w", p.ID, err)
	}
	info := f.w.protocol.Info()
	finish := sampling.FinishStop
	stopped := false
	for _, s := range f.Spec.Interact.StopStrings {
		if strings.HasSuffix(text, s) {
			stopped = true
		}
	}
	if !stopped && len(info.EOS) > 0 {
		ids = append(ids, info.EOS[0])
		finish = sampling.FinishEOS
	}
	if budget := f.Spec.Interact.MaxResponseTokens; len(ids) > budget {
		// Cut as the budget cuts a sample; the verifier sees what is kept.
		ids, finish = ids[:budget], sampling.FinishLength
		if text, err = f.w.client.Detokenize(ctx, ids); err != nil {
			return schemas.Trajectory{}, "", fmt.Errorf("detokenize the guidance trace of prompt %s: %w", p.ID, err)
		}
	}
	src := make([]int8, len(ids))
	for i := range src {
		src[i] = schemas.SourceGuide
	}
	return schemas.Trajectory{
		SchemaVersion: schemas.SchemaVersion, Run: f.Spec.Run, Step: f.Spec.Step,
		PolicyVersion: info.PolicyVersion, PromptID: p.ID, SampleIndex: int32(j), DataSource: p.DataSource,
		PromptIDs: append([]int32(nil), prompt...), ResponseIDs: ids, TokenSource: src,
		BehaviorLogProbs: make([]float32, len(ids)), ResponseText: text, FinishReason: finish,
	}, text, nil
}
