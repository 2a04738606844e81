package eval

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/sandbox"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// verdict is the score of one response.
type verdict struct {
	Correct   bool
	Score     float32
	Extracted string // the final answer, or the program's code
	Reason    string
}

// scorer scores responses to one benchmark's problems.
type scorer struct {
	kind string // a verify data source, evalconfig.VerifierMBPP or VerifierHumanEval
	v    verify.Verifier
	sb   *sandbox.Sandbox
}

func newScorer(kind string, sb *sandbox.Sandbox) (*scorer, error) {
	s := &scorer{kind: kind, sb: sb}
	switch kind {
	case evalconfig.VerifierMBPP, evalconfig.VerifierHumanEval:
		if sb == nil {
			return nil, fmt.Errorf("verifier %s needs the code sandbox", kind)
		}
	default:
		v, err := verify.ForDataSource(kind)
		if err != nil {
			return nil, err
		}
		s.v = v
	}
	return s, nil
}

// program builds the test program of a code problem for a response.
func program(kind string, p schemas.Prompt, response string) (code, prog string, err error) {
	extra, err := extraOf(p)
	if err != nil {
		return "", "", err
	}
	code = sandbox.ExtractCode(response)
	switch kind {
	case evalconfig.VerifierMBPP:
		tests := stringList(extra, "test_list")
		if len(tests) == 0 {
			return code, "", fmt.Errorf("problem %s has no test_list", p.ID)
		}
		return code, sandbox.MBPPProgram(code, stringField(extra, "test_setup_code"), stringList(extra, "test_imports"), tests), nil
	case evalconfig.VerifierHumanEval:
		test := stringField(extra, "test")
		if test == "" {
			return code, "", fmt.Errorf("problem %s has no test field", p.ID)
		}
		prog, err := sandbox.HumanEvalProgram(p.Problem, code, test, p.Answer)
		return code, prog, err
	}
	return "", "", fmt.Errorf("verifier %s runs no programs", kind)
}

// score scores one response. Misbehaving programs are scored wrong; an
// error means the scoring itself failed (a broken sandbox or problem).
func (s *scorer) score(ctx context.Context, p schemas.Prompt, response string) (verdict, error) {
	if s.v != nil {
		r := s.v.Verify(response, p.Answer)
		return verdict{Correct: r.Correct, Score: r.Score, Extracted: r.Extracted, Reason: r.Reason}, nil
	}
	code, prog, err := program(s.kind, p, response)
	if err != nil {
		return verdict{}, err
	}
	if code == "" {
		return verdict{Reason: "no code in the response"}, nil
	}
	r := s.sb.Run(ctx, prog)
	if r.Status == sandbox.StatusError {
		return verdict{}, fmt.Errorf("problem %s: %s", p.ID, r.Summary())
	}
	v := verdict{Correct: r.Passed(), Extracted: code, Reason: r.Summary()}
	if v.Correct {
		v.Score = 1
	}
	return v, nil
}

// ReferenceResponse is a response built from a problem's reference: the
// answer in \boxed{} for math, the reference code in a code block for
// MBPP, the canonical body for HumanEval. Scoring it checks the verifier
// and the benchmark file together.
func ReferenceResponse(kind string, p schemas.Prompt) (string, error) {
	switch kind {
	case evalconfig.VerifierMBPP:
		return "```python\n" + p.Answer + "\n```", nil
	case evalconfig.VerifierHumanEval:
		extra, err := extraOf(p)
		if err != nil {
			return "", err
		}
		c := stringField(extra, "canonical_solution")
		if c == "" {
			return "", fmt.Errorf("problem %s has no canonical_solution", p.ID)
		}
		return c, nil
	}
	return "The final answer is \\boxed{" + p.Answer + "}.", nil
}
