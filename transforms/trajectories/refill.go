package trajectories

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Dynamic sampling with refill (DAPO, Yu et al. 2025, arXiv:2503.14476):
// a group whose rewards are all equal carries no advantage and is dropped;
// further prompts are drawn and sampled until the step holds Batch kept
// groups, and kept groups beyond Batch (the last draw's surplus) are not
// written. Draw 0 is the step's ordinary selection (Select, or Generated for a task that generates its prompts);
// draw r >= 1 takes RefillCount prompts that no earlier draw of the step
// took, from a permutation of the dataset drawn for the step alone
// (RefillOrder), so that turning dynamic sampling on changes no step's
// first draw. Each draw is its own stage of the pipeline, fed the
// decisions of the earlier draws as a side input, so draws run one after
// the other and a step is one pipeline and one commit.

// Decision is what dynamic sampling made of one drawn group.
type Decision struct {
	Draw     int
	PromptID string
	// Order ranks the groups of one draw for trimming (a hash of the run
	// seed, the step, the draw and the prompt id: no preference for any
	// data source or id).
	Order uint64
	Kept  bool
	// Size is the number of trajectories of the group.
	Size  int
	Stats Stats
}

// RefillCount is the number of prompts draw r >= 1 takes after the earlier
// draws took drawn prompts and kept kept groups: what is missing from
// batch, scaled by the share kept so far (the whole batch when nothing
// was kept), at most batch.
func RefillCount(batch, kept, drawn int) int {
	missing := batch - kept
	if missing <= 0 {
		return 0
	}
	if kept == 0 {
		return batch
	}
	n := (missing*drawn + kept - 1) / kept
	return min(max(n, missing), batch)
}

// refillSalt separates the refill permutation from the epochs' (Select).
const refillSalt = 0x726566696c6c // "refill"

// RefillOrder is the order in which step's further draws take prompt ids.
func RefillOrder(ids []string, seed uint64, step int64) []string {
	return epochOrder(ids, seed^refillSalt, step)
}

// drawOrder ranks a group within its draw.
func drawOrder(seed uint64, step int64, draw int, id string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d/%s", seed, step, draw, id)
	return h.Sum64()
}

// Trained returns the ids of the groups a step trains on: the kept groups
// in draw order (then Order, then id), the first batch of them.
func Trained(ds []Decision, batch int) map[string]bool {
	kept := make([]Decision, 0, len(ds))
	for _, d := range ds {
		if d.Kept {
			kept = append(kept, d)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		a, b := kept[i], kept[j]
		if a.Draw != b.Draw {
			return a.Draw < b.Draw
		}
		if a.Order != b.Order {
			return a.Order < b.Order
		}
		return a.PromptID < b.PromptID
	})
	out := make(map[string]bool, min(batch, len(kept)))
	for _, d := range kept[:min(batch, len(kept))] {
		out[d.PromptID] = true
	}
	return out
}

// Decide computes each group's advantages as Advantages does and emits the
// kept groups' trajectories and one Decision per group, for draw draw.
//
//	PCollection<Group> -> PCollection<schemas.Trajectory>, PCollection<Decision>
func Decide(s beam.Scope, spec Spec, draw int, groups beam.PCollection) (trajectories, decisions beam.PCollection) {
	s = s.Scope("rollout.Decide")
	return beam.ParDo2(s, &decideFn{Spec: spec, Draw: draw}, groups)
}

type decideFn struct {
	Spec Spec `json:"spec"`
	Draw int  `json:"draw"`
}

func (f *decideFn) ProcessElement(g Group, emit func(schemas.Trajectory), decide func(Decision)) error {
	keep, err := GroupAdvantages(f.Spec.Advantage, g.Trajectories)
	if err != nil {
		return fmt.Errorf("rollout: prompt %s: %w", g.Prompt.ID, err)
	}
	if keep {
		for _, t := range g.Trajectories {
			emit(t)
		}
	}
	decide(Decision{Draw: f.Draw, PromptID: g.Prompt.ID, Order: drawOrder(f.Spec.Seed, f.Spec.Step, f.Draw, g.Prompt.ID),
		Kept: keep, Size: len(g.Trajectories), Stats: GroupStats(g, keep)})
	return nil
}

// Refill chooses draw r >= 1 of a step from the prompt ids (a side input)
// and the decisions of the earlier draws: RefillCount ids in RefillOrder
// that no earlier draw took, keyed by slot and joined with the prompts as
// Select does.
//
//	PCollection<schemas.Prompt>, PCollection<Decision> -> PCollection<KV<int, schemas.Prompt>>
func Refill(s beam.Scope, seed uint64, step int64, draw, batch int, prompts, earlier beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Refill")
	byID := beam.ParDo(s, keyByID, prompts)
	ids := beam.ParDo(s, idOf, prompts)
	slots := beam.ParDo(s, &refillFn{Seed: seed, Step: step, Draw: draw, Batch: batch}, beam.Impulse(s),
		beam.SideInput{Input: ids}, beam.SideInput{Input: earlier})
	return beam.ParDo(s, joinSlot, beam.CoGroupByKey(s, byID, slots))
}

type refillFn struct {
	Seed  uint64 `json:"seed"`
	Step  int64  `json:"step"`
	Draw  int    `json:"draw"`
	Batch int    `json:"batch"`
}

func (f *refillFn) ProcessElement(_ []byte, ids func(*string) bool, earlier func(*Decision) bool, emit func(string, int)) {
	taken, kept := map[string]bool{}, 0
	var d Decision
	for earlier(&d) {
		taken[d.PromptID] = true
		if d.Kept {
			kept++
		}
	}
	n := RefillCount(f.Batch, kept, len(taken))
	if n == 0 {
		return
	}
	seen := map[string]bool{}
	var all []string
	var id string
	for ids(&id) {
		if !seen[id] {
			seen[id] = true
			all = append(all, id)
		}
	}
	slot := 0
	for _, id := range RefillOrder(all, f.Seed, f.Step) {
		if slot == n {
			break
		}
		if !taken[id] {
			emit(id, slot)
			slot++
		}
	}
}

// Trim keeps the trajectories of the groups the step trains on (Trained
// over every decision, a side input).
//
//	PCollection<schemas.Trajectory>, PCollection<Decision> -> PCollection<schemas.Trajectory>
func Trim(s beam.Scope, batch int, trajectories, decisions beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Trim")
	return beam.ParDo(s, &trimFn{Batch: batch}, trajectories, beam.SideInput{Input: decisions})
}

type trimFn struct {
	Batch int `json:"batch"`

	// trained is computed from the side input once: it is the same for
	// every element of the (global) window.
	trained map[string]bool
}

func (f *trimFn) ProcessElement(t schemas.Trajectory, decisions func(*Decision) bool, emit func(schemas.Trajectory)) {
	if f.trained == nil {
		var all []Decision
		var d Decision
		for decisions(&d) {
			all = append(all, d)
		}
		f.trained = Trained(all, f.Batch)
	}
	if f.trained[t.PromptID] {
		emit(t)
	}
}

// DecisionMeta merges every decision's Stats into the step's meta as
// StepMeta does, counting the trained groups only as kept: kept groups
// beyond the batch become groups_surplus (their trajectories are not
// written). It adds draws (the draws that took at least one prompt),
// groups_surplus, and groups_short (how many kept groups the step lacks
// of the batch when the prompts or the draws ran out).
//
//	PCollection<Decision> -> PCollection<parquetio.StepMeta>
func DecisionMeta(s beam.Scope, batch int, decisions beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.DecisionMeta")
	return beam.ParDo(s, &decisionMetaFn{Batch: batch}, beam.Impulse(s), beam.SideInput{Input: decisions})
}

type decisionMetaFn struct {
	Batch int `json:"batch"`
}

func (f *decisionMetaFn) ProcessElement(_ []byte, iter func(*Decision) bool) parquetio.StepMeta {
	var all []Decision
	var d Decision
	for iter(&d) {
		all = append(all, d)
	}
	return DecisionsMeta(all, f.Batch)
}

// DecisionsMeta is DecisionMeta's merge of a step's decisions.
func DecisionsMeta(all []Decision, batch int) parquetio.StepMeta {
	trained := Trained(all, batch)
	var st Stats
	draws := map[int]bool{}
	var surplus int64
	for _, d := range all {
		draws[d.Draw] = true
		s := d.Stats
		if d.Kept && !trained[d.PromptID] {
			// Sampled, kept, but past the batch: counted as sampled, not
			// as written.
			c := make(map[string]int64, len(s.Counts))
			for k, v := range s.Counts {
				c[k] = v
			}
			c["groups_kept"]--
			c["trajectories_written"] -= int64(d.Size)
			s.Counts = c
			surplus++
		}
		st.Add(s)
	}
	ss := st.StepStats()
	ss.Refill = &records.RefillStats{Draws: int64(len(draws)), GroupsSurplus: surplus, GroupsShort: int64(max(0, batch-len(trained)))}
	m := parquetio.StepMeta{Meta: ss.Meta()}
	if st.Counts["trajectories"] > 0 {
		m.PolicyVersion = st.VersionMax
	}
	return m
}
