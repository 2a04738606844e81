package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/builtin"
)

// Answers with a fixed meaning.
const (
	Unknown = "unknown" // the name is not in the knowledge base
	Invalid = "invalid" // the query does not parse
	Yes     = "yes"
	No      = "no"
)

// KindCollaborators is the kind of the task's built-in collaborators
// (collab.RoleConfig.Kind): deterministic agents that answer about the
// task of the collaborators' demo_task (the default task when unset), so
// that rollouts run with no model server.
const KindCollaborators = "builtin-demo"

// build is the builder of kind builtin-demo.
func build(_ context.Context, agent collab.Agent, role collab.RoleConfig, cfg collab.Config, _ collab.Env) (collab.Collaborator, error) {
	tc := DefaultConfig()
	if cfg.Task != "" {
		var err error
		if tc, err = DecodeConfig(cfg.Task); err != nil {
			return nil, fmt.Errorf("collaborators' demo_task: %w", err)
		}
	}
	task, err := New(tc)
	if err != nil {
		return nil, fmt.Errorf("collaborators' demo_task: %w", err)
	}
	switch agent {
	case collab.Knowledge:
		return NewKnowledge(task, role.NoiseSchedule()), nil
	case collab.Reason:
		return Reasoner{}, nil
	case collab.Verify:
		return NewVerifier(task), nil
	}
	return nil, fmt.Errorf("builtin-demo has no %q agent", agent)
}

func ok(text string) collab.Answer { return collab.Answer{Text: text, Status: schemas.StatusOK} }

// Knowledge answers entity names from the demo task's knowledge base.
type Knowledge struct {
	task  *Task
	noise collab.Noise
}

// NewKnowledge answers from task, noisy with the schedule noise.
func NewKnowledge(task *Task, noise collab.Noise) *Knowledge {
	return &Knowledge{task: task, noise: noise}
}

// Deterministic reports whether answers ignore the seed (no noise).
func (k *Knowledge) Deterministic() bool { return k.noise.IsZero() }

// Answer returns the value of the entity named by q.Text, or a wrong value
// from the same range with probability noise.P(q.Step) (Noisy set), or
// Unknown.
func (k *Knowledge) Answer(_ context.Context, q collab.Query) (collab.Answer, error) {
	name := strings.ToLower(strings.TrimSpace(q.Text))
	v, found := k.task.Lookup(name)
	if !found {
		return ok(Unknown), nil
	}
	if !k.noise.Noisy(q) {
		return ok(strconv.Itoa(v)), nil
	}
	cfg := k.task.Config()
	span := cfg.MaxValue - cfg.MinValue + 1
	if span < 2 {
		return ok(strconv.Itoa(v)), nil
	}
	w := cfg.MinValue + collab.IntN(q.Seed, 1, span-1)
	if w >= v {
		w++ // skip the true value: uniform over the others
	}
	a := ok(strconv.Itoa(w))
	a.Noisy = true
	return a, nil
}

// Reasoner computes arithmetic sub-tasks exactly.
type Reasoner struct{}

// Deterministic is true: the answer depends on the text only.
func (Reasoner) Deterministic() bool { return true }

// Answer evaluates q.Text (see Eval; no names allowed, a trailing '=' or
// '?' is ignored) and answers the value, or Invalid.
func (Reasoner) Answer(_ context.Context, q collab.Query) (collab.Answer, error) {
	s := strings.TrimRight(strings.TrimSpace(q.Text), "=? ")
	v, err := builtin.Eval(s, nil)
	if err != nil {
		return ok(Invalid), nil
	}
	return ok(builtin.Format(v)), nil
}

// Verifier checks claimed equations and facts.
type Verifier struct {
	task *Task
}

// NewVerifier checks facts against task (nil: equations only).
func NewVerifier(task *Task) *Verifier { return &Verifier{task: task} }

// Deterministic is true: the answer depends on the text only.
func (*Verifier) Deterministic() bool { return true }

// Answer checks "lhs=rhs" (one '=', or "=="), each side an expression that
// may name entities: Yes when both sides are equal, No when not, Unknown
// when a name is not an entity, Invalid when it does not parse.
func (v *Verifier) Answer(_ context.Context, q collab.Query) (collab.Answer, error) {
	return ok(v.Check(q.Text)), nil
}

// Check is the verdict on one claim (see Answer).
func (v *Verifier) Check(claim string) string {
	claim = strings.Replace(strings.TrimSpace(claim), "==", "=", 1)
	lhs, rhs, found := strings.Cut(claim, "=")
	if !found || strings.Contains(rhs, "=") {
		return Invalid
	}
	var names builtin.Resolver
	if v.task != nil {
		names = func(name string) (int64, bool) {
			x, ok := v.task.Lookup(name)
			return int64(x), ok
		}
	}
	l, errL := builtin.Eval(lhs, names)
	r, errR := builtin.Eval(rhs, names)
	var unknown *builtin.UnknownNameError
	switch {
	case errors.As(errL, &unknown) || errors.As(errR, &unknown):
		if (errL == nil || errors.As(errL, &unknown)) && (errR == nil || errors.As(errR, &unknown)) {
			return Unknown
		}
		return Invalid
	case errL != nil || errR != nil:
		return Invalid
	case l.Cmp(r) == 0:
		return Yes
	}
	return No
}
