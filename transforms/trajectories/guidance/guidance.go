// Package guidance configures off-policy guidance traces (LUFFY, Yan et
// al. 2025, arXiv:2504.14945), a run's rollout.guidance: the last Traces
// samples of each group are written by someone else, the prompt's
// reference solution or a teacher model (a collaborator role), instead of
// being sampled from the policy. transforms/trajectories writes them into
// each group; this package builds no Beam graph, so that the run
// configuration (runconfig) reads it without linking Beam.
package guidance

import (
	"fmt"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// Sources of the traces (Config.Source).
const (
	SourceSolution = "solution" // the prompt's reference solution
	SourceTeacher  = "teacher"  // a teacher model's answer (Config.Teacher)
)

// DefaultTeacherSystem is the teacher's system prompt when its role sets
// none.
const DefaultTeacherSystem = "Solve the problem. Reason step by step, then put the final answer within \\boxed{}."

// Config configures off-policy guidance traces: a run's
// rollout.guidance.
type Config struct {
	// Source is "" (off), "solution" or "teacher".
	Source string `yaml:"source" json:"source"`
	// Traces is the number of samples of each group that are guidance
	// traces (LUFFY: 1 of 8); the group keeps rollout.group_size samples.
	// Default 1 when Source is set.
	Traces int `yaml:"traces" json:"traces"`
	// Teacher is the model that writes the traces under "teacher": a
	// collaborator role (kind openai, endpoint, model, ...; see
	// transforms/collab), sent the problem. Unset system and prompt: a
	// step-by-step solution ending in \boxed{} (DefaultTeacherSystem).
	Teacher *collab.RoleConfig `yaml:"teacher,omitempty" json:"teacher,omitempty"`
}

// On reports whether guidance traces are configured.
func (g Config) On() bool { return g.Source != "" }

// Validate reports the first invalid field against the group size.
func (g Config) Validate(groupSize int) error {
	switch g.Source {
	case "":
		if g.Teacher != nil || g.Traces != 0 {
			return fmt.Errorf("rollout.guidance: traces and teacher are set but source is empty: set source: solution or teacher")
		}
		return nil
	case SourceSolution:
		if g.Teacher != nil {
			return fmt.Errorf("rollout.guidance.teacher is set but source is solution: set source: teacher to use it")
		}
	case SourceTeacher:
		if g.Teacher == nil {
			return fmt.Errorf("rollout.guidance.source is teacher but no teacher is configured: set rollout.guidance.teacher (kind openai, endpoint, model)")
		}
		if err := (collab.Config{Reason: g.TeacherRole()}).Validate(); err != nil {
			return fmt.Errorf("rollout.guidance.teacher: %w", err)
		}
	default:
		return fmt.Errorf("rollout.guidance.source %q is unknown: use solution (the dataset's reference solutions) or teacher", g.Source)
	}
	if g.Traces < 1 || groupSize-g.Traces < 1 {
		return fmt.Errorf("rollout.guidance.traces %d must leave the group of %d at least one on-policy sample and be at least 1 (LUFFY: 1 of 8)", g.Traces, groupSize)
	}
	return nil
}

// TeacherRole is the teacher's role with its defaults, nil when none is
// configured: DefaultTeacherSystem and the problem as the prompt when the
// role sets neither system nor prompt, and collab.ContextProblem when it
// sets no context.
func (g Config) TeacherRole() *collab.RoleConfig {
	if g.Teacher == nil {
		return nil
	}
	r := *g.Teacher
	if r.System == "" && r.SystemFile == "" && r.Prompt == "" && r.PromptFile == "" {
		r.System, r.Prompt = DefaultTeacherSystem, "{{.Problem}}"
	}
	if r.Context == "" {
		r.Context = collab.ContextProblem
	}
	return &r
}
