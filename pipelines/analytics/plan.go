package analytics

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
)

// StepRange selects steps First..Last inclusive; a negative bound is open.
type StepRange struct {
	First, Last int64
}

// AllSteps selects every step.
var AllSteps = StepRange{First: -1, Last: -1}

// ParseStepRange parses "a-b", "a-", "-b", "a" or "" (all steps).
func ParseStepRange(s string) (StepRange, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return AllSteps, nil
	}
	bad := fmt.Errorf("--steps %q: want a-b, a-, -b or a single step (non-negative integers)", s)
	num := func(x string) (int64, error) {
		if x == "" {
			return -1, nil
		}
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil || n < 0 {
			return 0, bad
		}
		return n, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	first, err := num(lo)
	if err != nil {
		return StepRange{}, err
	}
	last, err := num(hi)
	if err != nil {
		return StepRange{}, err
	}
	if (!found && first < 0) || (found && lo == "" && hi == "") {
		return StepRange{}, bad
	}
	if first >= 0 && last >= 0 && first > last {
		return StepRange{}, fmt.Errorf("--steps %q: the first step is after the last", s)
	}
	return StepRange{First: first, Last: last}, nil
}

// Contains reports whether step k is in the range.
func (r StepRange) Contains(k int64) bool {
	return (r.First < 0 || k >= r.First) && (r.Last < 0 || k <= r.Last)
}

// StepRef is one committed step to analyse.
type StepRef struct {
	Step          int64                  `json:"step"`
	Dir           string                 `json:"dir"`
	Rows          int64                  `json:"rows"`
	PolicyVersion int64                  `json:"policy_version"`
	Files         []schemas.ManifestFile `json:"files"`
	// Mismatch is what the learner recorded about the step's
	// train-inference mismatch (nil: no record, or none measured).
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	// Learner is the learner's record of its update on this step's
	// trajectories; nil before the learner has run on it.
	Learner *LearnerMetrics `json:"learner,omitempty"`
}

// Skipped is a step directory that was not read, and why.
type Skipped struct {
	Step   int64  `json:"step"`
	Dir    string `json:"dir"`
	Reason string `json:"reason"`
}

// Plan is what a run directory holds: the committed steps to read and the
// step directories skipped.
type Plan struct {
	Run     string    `json:"run"`
	Steps   []StepRef `json:"steps"`
	Skipped []Skipped `json:"skipped,omitempty"`
}

// Discover lists the step directories of run (local or gs://) in range and
// reads their manifests. A step without a manifest, or whose manifest is
// not of trajectories, is skipped; an unreadable or invalid manifest is an
// error naming it.
func Discover(ctx context.Context, run string, r StepRange) (Plan, error) {
	run = strings.TrimSuffix(run, "/")
	if !storage.IsRemote(run) {
		run = filepath.Clean(run)
	}
	plan := Plan{Run: run}
	// Locally the glob yields the step directories; object stores have no
	// directories, so there every object below them is listed ("**"
	// crosses "/" in Beam's glob) and the step is the first path element
	// after the run.
	glob := rundir.Steps(run)
	if storage.IsRemote(run) {
		glob += "*"
	}
	paths, err := storage.List(ctx, glob)
	if err != nil {
		return plan, fmt.Errorf("list the steps of run %s: %w", run, err)
	}
	dirs := map[int64]string{}
	for _, p := range paths {
		rel := strings.TrimPrefix(filepath.ToSlash(p), filepath.ToSlash(run)+"/")
		name, _, _ := strings.Cut(rel, "/")
		k, ok := rundir.ParseStepName(name)
		if !ok || !r.Contains(k) {
			continue
		}
		dirs[k] = storage.Join(run, name)
	}
	keys := make([]int64, 0, len(dirs))
	for k := range dirs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		dir := dirs[k]
		m, err := schemas.ReadManifest(ctx, dir)
		if errors.Is(err, schemas.ErrNoManifest) {
			plan.Skipped = append(plan.Skipped, Skipped{Step: k, Dir: dir, Reason: "no " + rundir.ManifestName + ": the step is not committed"})
			continue
		}
		if err != nil {
			return plan, err
		}
		if m.Kind != schemas.KindOf[schemas.Trajectory]() {
			plan.Skipped = append(plan.Skipped, Skipped{Step: k, Dir: dir, Reason: fmt.Sprintf("manifest kind %q, not trajectories", m.Kind)})
			continue
		}
		if m.Step != k {
			return plan, fmt.Errorf("%s: manifest says step %d but the directory is step %d (the run is damaged; rewrite the step)", storage.Join(dir, rundir.ManifestName), m.Step, k)
		}
		mm, err := readMismatch(ctx, run, k)
		if err != nil {
			return plan, err
		}
		plan.Steps = append(plan.Steps, StepRef{Step: k, Dir: dir, Rows: m.Rows, PolicyVersion: m.PolicyVersion, Files: m.Files, Mismatch: mm})
	}
	if len(plan.Steps) == 0 {
		return plan, fmt.Errorf("run %s has no committed step in the range asked for (%d step directories skipped); check --run and --steps", run, len(plan.Skipped))
	}
	if err := loadLearner(ctx, run, plan.Steps); err != nil {
		return plan, err
	}
	return plan, nil
}
