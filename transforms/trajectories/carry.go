package trajectories

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// rollout.carry: a step's batch closes at the first interruption (the push
// that starts the next step's rollout) when at least Carry.MinGroups of
// its groups have finished. From then on a sample that is interrupted
// stops where it is, and one that has not started does not start; every
// group with such a sample is carried whole into the next step: written
// as a CarriedGroup under the step's carry directory (before the step's
// manifest, so a committed step holds them all), and continued by the
// next step's rollout (Resumed), which scores it and computes its
// advantages once it is whole.

// Sample states of a carried group.
const (
	// SampleDone: the sample finished (Trajectory, PolicyText, Error).
	SampleDone = "done"
	// SampleStopped: an interruption stopped it (Resume).
	SampleStopped = "stopped"
	// SampleUnstarted: the batch closed before it started.
	SampleUnstarted = "unstarted"
)

// CarriedFormat is the layout of the CarriedGroup files this version
// writes and reads: 1, a stopped sample's response so far in its
// Resume's trajectory columns. Files of another layout (an earlier aipo's)
// are refused with the step to roll out again.
const CarriedFormat = 1

// CarriedGroup is a group carried into the next step, as it is written
// under a step's carry directory (JSON, one file per group).
type CarriedGroup struct {
	// Format is CarriedFormat.
	Format int            `json:"format"`
	Prompt schemas.Prompt `json:"prompt"`
	// PromptIDs is the prompt's token ids, as its samples were sampled.
	PromptIDs []int32 `json:"prompt_ids"`
	// Step is the step that drew the prompt: its samples' seeds, session
	// names and trajectories' step column are that step's.
	Step int64 `json:"step"`
	// Carries is how many steps' batches the group has been carried past.
	Carries int64 `json:"carries"`
	// Samples are the group's G samples, in order.
	Samples []CarriedSample `json:"samples"`
	// The group's counts so far (of its finished samples; a stopped
	// sample's are in its Resume).
	PolicyCalls, PolicyRetries, PolicyInterrupted, Guided, GuideMissing int64
}

// CarriedSample is one sample of a carried group.
type CarriedSample struct {
	State      string              `json:"state"`
	Trajectory *schemas.Trajectory `json:"trajectory,omitempty"`
	PolicyText string              `json:"policy_text,omitempty"`
	Error      string              `json:"error,omitempty"`
	Resume     *interact.Resume    `json:"resume,omitempty"`
}

// CarriedFile is the file of the carried group of prompt id under dir (a
// step's carry directory).
func CarriedFile(dir, id string) string {
	return storage.Join(dir, url.PathEscape(id)+".json")
}

// CarriedGlob matches every carried group under dir.
func CarriedGlob(dir string) string { return storage.Join(dir, "*.json") }

// carryGate is one step rollout's decision, in one process, whether its
// batch closes at the first interruption.
type carryGate struct {
	min  int64
	done atomic.Int64 // groups of the step finished in this process
	mu   sync.Mutex
	// state: 0 undecided, 1 closed (samples are carried), 2 open (the
	// samples go on inside the step).
	state atomic.Int32
}

// carryGatesKept bounds the gates a process keeps: those of the latest
// rollouts it took part in. A rollout runs beside at most the learner's
// step before it (run.async) and the next one, so a gate that 16 newer
// rollouts have pushed out belongs to a rollout long over; a process that
// runs a whole run (aipo train, a long-lived worker) keeps 16 gates, not
// one a step.
const carryGatesKept = 16

var (
	carryGatesMu    sync.Mutex
	carryGates      = map[string]*carryGate{}
	carryGatesOrder []string // the keys, oldest first
)

// carryGateOf is the gate of c's rollout (nil when carry is off).
func carryGateOf(c Carry) *carryGate {
	if c.Dir == "" {
		return nil
	}
	carryGatesMu.Lock()
	defer carryGatesMu.Unlock()
	g, ok := carryGates[c.Key]
	if !ok {
		g = &carryGate{min: int64(max(c.MinGroups, 1))}
		carryGates[c.Key] = g
		carryGatesOrder = append(carryGatesOrder, c.Key)
		if k := len(carryGatesOrder) - carryGatesKept; k > 0 {
			for _, old := range carryGatesOrder[:k] {
				delete(carryGates, old)
			}
			carryGatesOrder = append(carryGatesOrder[:0], carryGatesOrder[k:]...)
		}
	}
	return g
}

// decide is asked at an interruption: the first one closes the batch when
// enough groups have finished, or leaves it open for good.
func (g *carryGate) decide() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state.Load() == 0 {
		if g.done.Load() >= g.min {
			g.state.Store(1)
		} else {
			g.state.Store(2)
		}
	}
	return g.state.Load() == 1
}

// closed reports whether the batch has closed (nil: carry off).
func (g *carryGate) closed() bool { return g != nil && g.state.Load() == 1 }

// finished counts a group that finished in the step.
func (g *carryGate) finished() {
	if g != nil {
		g.done.Add(1)
	}
}

// writeCarried writes g, a carried group, under dir.
func writeCarried(ctx context.Context, dir string, g Group) error {
	if err := storage.WriteAtomic(ctx, CarriedFile(dir, g.Prompt.ID), []byte(g.Carried)); err != nil {
		return fmt.Errorf("rollout: carry prompt %s: %w", g.Prompt.ID, err)
	}
	return nil
}

// ReadCarried reads the carried groups under dir (a committed step's carry
// directory), whose manifest counts want of them.
func ReadCarried(ctx context.Context, dir string, want int64) ([]string, error) {
	files, err := storage.List(ctx, CarriedGlob(dir))
	if err != nil {
		return nil, fmt.Errorf("rollout: carried groups in %s: %w", dir, err)
	}
	if int64(len(files)) != want {
		return nil, fmt.Errorf("rollout: %s holds %d carried groups, but its step's manifest counts %d (groups_carried): the step's carried groups are incomplete; roll that step out again (aipo rollout --step <k> --force)", dir, len(files), want)
	}
	out := make([]string, 0, len(files))
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("rollout: carried group %s: %w", f, err)
		}
		var cg CarriedGroup
		if err := json.Unmarshal(b, &cg); err != nil {
			return nil, fmt.Errorf("rollout: carried group %s: %w", f, err)
		}
		if cg.Format != CarriedFormat {
			return nil, fmt.Errorf("rollout: carried group %s is in layout %d, and this aipo reads layout %d (an earlier version carried it): roll that step out again (aipo rollout --step <k> --force) to carry its groups anew", f, cg.Format, CarriedFormat)
		}
		out = append(out, string(b))
	}
	return out, nil
}

// ClearCarried removes the carried groups under dir (a step about to be
// rolled out again: a killed attempt may have left some).
func ClearCarried(ctx context.Context, dir string) error {
	files, err := storage.List(ctx, CarriedGlob(dir))
	if err != nil {
		return fmt.Errorf("rollout: carried groups in %s: %w", dir, err)
	}
	for _, f := range files {
		if err := storage.Remove(ctx, f); err != nil {
			return fmt.Errorf("rollout: remove %s: %w", f, err)
		}
	}
	return nil
}

// Resumed continues the carried groups (CarriedGroup JSON, from the step
// before) in spec's step: their unfinished samples go on from their
// prompts plus their tokens, on the policy spec names; their finished
// samples pass through.
//
//	-> PCollection<Group>
func Resumed(s beam.Scope, spec Spec, groups []string) beam.PCollection {
	s = s.Scope("rollout.Resumed")
	return beam.ParDo(s, &resumeFn{Spec: spec}, beam.CreateList(s, groups))
}

// resumeFn runs the carried groups of a bundle concurrently, as sampleFn
// runs its prompts.
type resumeFn struct {
	Spec Spec `json:"spec"`
	f    *sampleFn
}

func (r *resumeFn) Setup(ctx context.Context) error {
	r.f = &sampleFn{Spec: r.Spec}
	return r.f.Setup(ctx)
}

func (r *resumeFn) Teardown() error { return r.f.Teardown() }

func (r *resumeFn) StartBundle(ctx context.Context, emit func(Group)) { r.f.StartBundle(ctx, emit) }

func (r *resumeFn) ProcessElement(ctx context.Context, text string, emit func(Group)) error {
	f := r.f
	if f.b == nil {
		f.StartBundle(ctx, emit)
	}
	var cg CarriedGroup
	if err := json.Unmarshal([]byte(text), &cg); err != nil {
		return fmt.Errorf("rollout: carried group: %w", err)
	}
	if cg.Format != CarriedFormat {
		return fmt.Errorf("rollout: carried group of prompt %s is in layout %d, and this aipo reads layout %d: roll the step that carried it out again", cg.Prompt.ID, cg.Format, CarriedFormat)
	}
	if len(cg.Samples) != f.Spec.GroupSize {
		return fmt.Errorf("rollout: carried group of prompt %s has %d samples, but rollout.group_size is %d: a carried group continues with the group size it started with; set group_size back to %d until no group is carried", cg.Prompt.ID, len(cg.Samples), f.Spec.GroupSize, len(cg.Samples))
	}
	b := f.b
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		g := runGroup(b.ctx, f.w, f.Spec, cg.Prompt, cg.PromptIDs, &cg, b.cancel)
		b.mu.Lock()
		b.ready = append(b.ready, g)
		b.mu.Unlock()
	}()
	return f.drain(ctx, emit)
}

func (r *resumeFn) FinishBundle(ctx context.Context, emit func(Group)) error {
	return r.f.FinishBundle(ctx, emit)
}
