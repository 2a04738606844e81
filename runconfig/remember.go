package runconfig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"gopkg.in/yaml.v3"
)

// ConfigChange is one line of config_changes.jsonl: the fields changed and
// the step from which the new values apply.
type ConfigChange struct {
	FromStep int64         `json:"from_step"`
	Changes  []FieldChange `json:"changes"`
	// Before is the whole run.yaml in force before FromStep: a run that
	// resumes from a full state older than the change replays the learner
	// steps before it with their own configuration (absent in lines of
	// earlier builds).
	Before string `json:"before_yaml,omitempty"`
}

// FieldChange is one changed field, by its dotted path in the run YAML.
type FieldChange struct {
	Field string `json:"field"`
	Was   string `json:"was"`
	Now   string `json:"now"`
}

func (c FieldChange) String() string { return c.Field + " " + c.Was + " -> " + c.Now }

// ConfigChangedError is Remember's refusal of a configuration that
// differs from the one the run directory recorded.
type ConfigChangedError struct {
	Dir     string
	Changes []FieldChange
	Step    int64 // the step the change would apply from
}

func (e *ConfigChangedError) Error() string {
	parts := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		parts[i] = c.String()
	}
	return fmt.Sprintf("run directory %s was started with a different configuration (%s); changed: %s. "+
		"Continue with the recorded one (aipo train --run %s), start a new run directory, "+
		"or pass --reconfigure to apply the change from step %d (recorded in %s)",
		e.Dir, rundir.RunYAMLName, strings.Join(parts, "; "), e.Dir, e.Step, rundir.ConfigChangesName)
}

// ignoredFields differ between two invocations of one run without
// changing it: where the run directory is, and what follows from it;
// run.tensorboard only says whether this invocation writes TensorBoard's
// event files, run.allow_no_signal how this invocation judges the run's end,
// learner.zero how a group of ranks reduces the same sums (the same bits).
var ignoredFields = map[string]bool{"run.dir": true, "data.dead_letter_dir": true, "run.tensorboard": true, "run.allow_no_signal": true,
	"learner.zero": true}

// Remember makes the run directory remember cfg: a run without
// run.yaml gets cfg's; a run whose run.yaml differs from cfg (but for its
// location) is refused with the changed fields, unless reconfigure is set,
// which records the change in config_changes.jsonl with the step it applies
// from (the next step to roll out) and makes cfg the run's configuration.
// ctx must carry the run's lease (Claim).
func Remember(ctx context.Context, cfg Config, reconfigure bool, logf func(string)) error {
	runDir := cfg.Run.Dir
	if err := runlease.Require(ctx, runDir); err != nil {
		return err
	}
	p := rundir.RunYAML(runDir)
	now, err := cfg.YAML()
	if err != nil {
		return err
	}
	was, err := storage.ReadFile(ctx, p)
	if errors.Is(err, storage.ErrNotExist) {
		return storage.WriteAtomic(ctx, p, now)
	}
	if err != nil {
		return fmt.Errorf("run directory %s: read %s: %w", runDir, rundir.RunYAMLName, err)
	}
	changes, err := diffYAML(was, now)
	if err != nil {
		return fmt.Errorf("run directory %s: %s: %w (fix or remove the file)", runDir, p, err)
	}
	if len(changes) == 0 {
		return nil
	}
	step := int64(0)
	if _, k, err := checkpoint.Latest(ctx, runDir); err == nil {
		step = k
	}
	if !reconfigure {
		return &ConfigChangedError{Dir: runDir, Changes: changes, Step: step}
	}
	line, err := json.Marshal(ConfigChange{FromStep: step, Changes: changes, Before: string(was)})
	if err != nil {
		return err
	}
	lp := rundir.ConfigChanges(runDir)
	log, err := storage.ReadFile(ctx, lp)
	if err != nil && !errors.Is(err, storage.ErrNotExist) {
		return fmt.Errorf("run directory %s: read %s: %w", runDir, rundir.ConfigChangesName, err)
	}
	if err := storage.WriteAtomic(ctx, lp, append(append(log, line...), '\n')); err != nil {
		return err
	}
	if err := storage.WriteAtomic(ctx, p, now); err != nil {
		return err
	}
	if logf != nil {
		parts := make([]string, len(changes))
		for i, c := range changes {
			parts[i] = c.String()
		}
		logf(fmt.Sprintf("run directory %s: configuration changed from step %d (%s)", runDir, step, strings.Join(parts, "; ")))
	}
	return nil
}

// diffYAML lists the leaf fields that differ between two run YAMLs, by
// dotted path, sorted, the ignored ones left out; the recorded one's data
// shorthand is compared as Fill writes it out (ExpandShorthand).
func diffYAML(was, now []byte) ([]FieldChange, error) {
	// A run.yaml of an earlier build may ask for the demo task in the
	// shorthand (data.demo); compare it as written out.
	was, err := ExpandShorthand(was)
	if err != nil {
		return nil, err
	}
	var a, b map[string]any
	if err := yaml.Unmarshal(was, &a); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(now, &b); err != nil {
		return nil, err
	}
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", a, fa)
	flatten("", b, fb)
	// A field that the recorded file lacks (written by a build without it)
	// and that holds its default now is not a change.
	fd := map[string]string{}
	if db, err := Default().YAML(); err == nil {
		var d map[string]any
		if yaml.Unmarshal(db, &d) == nil {
			flatten("", d, fd)
		}
	}
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	var out []FieldChange
	for k := range keys {
		if ignoredFields[k] || fa[k] == fb[k] {
			continue
		}
		if _, had := fa[k]; !had && fb[k] == fd[k] {
			continue
		}
		out = append(out, FieldChange{Field: k, Was: orUnset(fa[k]), Now: orUnset(fb[k])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out, nil
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// flatten writes every leaf of v under its dotted path; lists are leaves,
// written as flow YAML.
func flatten(prefix string, v any, out map[string]string) {
	switch m := v.(type) {
	case map[string]any:
		for k, e := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, e, out)
		}
	case nil:
	default:
		if _, isList := v.([]any); isList {
			b, _ := json.Marshal(v)
			out[prefix] = string(b)
			return
		}
		out[prefix] = fmt.Sprint(v)
	}
}

// At is the configuration learner step k ran with: cfg, or, when
// config_changes.jsonl records a change from a later step, the run.yaml
// that was in force before it. A change recorded by an earlier build
// (without the previous run.yaml) is refused when it touched what the
// learner computes with.
func At(ctx context.Context, cfg Config, k int64) (Config, error) {
	b, err := storage.ReadFile(ctx, rundir.ConfigChanges(cfg.Run.Dir))
	if errors.Is(err, storage.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("replay of learner step %d: read %s: %w", k, rundir.ConfigChangesName, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var ch ConfigChange
		if err := json.Unmarshal(sc.Bytes(), &ch); err != nil {
			return cfg, fmt.Errorf("replay of learner step %d: %s line %d: %w", k, rundir.ConfigChangesName, line, err)
		}
		if ch.FromStep <= k {
			continue
		}
		// The earliest change after k: its Before is what step k ran with.
		if ch.Before == "" {
			for _, f := range ch.Changes {
				if learnerField(f.Field) {
					return cfg, fmt.Errorf("replay of learner step %d: %s line %d changed %s from step %d but does not record the configuration before it (written by an earlier build), so step %d cannot be replayed as it ran; set checkpoint.save_every: 1 for such runs", k, rundir.ConfigChangesName, line, f.Field, ch.FromStep, k)
				}
			}
			return cfg, nil
		}
		was, err := Parse([]byte(ch.Before), rundir.ConfigChangesName, cfg.BaseDir())
		if err != nil {
			return cfg, fmt.Errorf("replay of learner step %d: the configuration before step %d in %s: %w", k, ch.FromStep, rundir.ConfigChangesName, err)
		}
		out := cfg
		out.Learner, out.Rollout.TemplateTokens, out.Run.Name, out.Run.Seed = was.Learner, was.Rollout.TemplateTokens, was.Run.Name, was.Run.Seed
		return out, nil
	}
	return cfg, sc.Err()
}

// learnerField reports whether a run.yaml field changes what a learner
// step computes.
func learnerField(f string) bool {
	return strings.HasPrefix(f, "learner.") || f == "rollout.template_tokens"
}
