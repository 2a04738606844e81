package trajectories

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Select chooses the prompts of a step: batch prompts (all of them when
// the input has fewer distinct ids), in an order that is a fresh
// permutation of the ids every epoch (an epoch is one pass over the
// dataset), drawn from seed. Step k takes positions [k*batch, (k+1)*batch)
// of the concatenated epochs. Prompts with the same id count once (the
// first by problem text is kept). The output is keyed by the prompt's slot
// 0..batch-1.
//
//	PCollection<schemas.Prompt> -> PCollection<KV<int, schemas.Prompt>>
func Select(s beam.Scope, seed uint64, step int64, batch int, prompts beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Select")
	if batch < 1 {
		panic(fmt.Sprintf("rollout.Select: batch %d must be at least 1", batch))
	}
	byID := beam.ParDo(s, keyByID, prompts)
	ids := beam.ParDo(s, idOf, prompts)
	slots := beam.ParDo(s, &chooseFn{Seed: seed, Step: step, Batch: batch}, beam.Impulse(s), beam.SideInput{Input: ids})
	return beam.ParDo(s, joinSlot, beam.CoGroupByKey(s, byID, slots))
}

func keyByID(p schemas.Prompt) (string, schemas.Prompt) { return p.ID, p }

func idOf(p schemas.Prompt) string { return p.ID }

// chooseFn picks the step's ids from all ids (a side input).
type chooseFn struct {
	Seed  uint64 `json:"seed"`
	Step  int64  `json:"step"`
	Batch int    `json:"batch"`
}

func (f *chooseFn) ProcessElement(_ []byte, iter func(*string) bool, emit func(string, int)) {
	seen := map[string]bool{}
	var ids []string
	var id string
	for iter(&id) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for slot, id := range ChooseIDs(ids, f.Seed, f.Step, f.Batch) {
		emit(id, slot)
	}
}

// ChooseIDs returns the ids of step's batch (see Select), in slot order.
// ids must be distinct; their order does not matter.
func ChooseIDs(ids []string, seed uint64, step int64, batch int) []string {
	n := len(ids)
	if n == 0 {
		return nil
	}
	if batch >= n {
		return epochOrder(ids, seed, 0)
	}
	start := step * int64(batch)
	epoch := start / int64(n)
	pos := int(start % int64(n))
	chosen := make([]string, 0, batch)
	taken := map[string]bool{}
	order := epochOrder(ids, seed, epoch)
	for len(chosen) < batch {
		if pos == n {
			epoch, pos = epoch+1, 0
			order = epochOrder(ids, seed, epoch)
		}
		if id := order[pos]; !taken[id] {
			taken[id] = true
			chosen = append(chosen, id)
		}
		pos++
	}
	return chosen
}

// epochOrder is the seeded permutation of ids for one epoch.
func epochOrder(ids []string, seed uint64, epoch int64) []string {
	type keyed struct {
		k  uint64
		id string
	}
	ks := make([]keyed, len(ids))
	for i, id := range ids {
		h := fnv.New64a()
		_, _ = h.Write([]byte(id))
		ks[i] = keyed{collab.DeriveSeed(seed, epoch, id, 0, 0) ^ h.Sum64(), id}
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].k != ks[j].k {
			return ks[i].k < ks[j].k
		}
		return ks[i].id < ks[j].id
	})
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.id
	}
	return out
}

// joinSlot emits the chosen prompts keyed by slot.
func joinSlot(_ string, prompts func(*schemas.Prompt) bool, slots func(*int) bool, emit func(int, schemas.Prompt)) {
	var slot int
	if !slots(&slot) {
		return
	}
	var best, p schemas.Prompt
	found := false
	for prompts(&p) {
		if !found || p.Problem < best.Problem || (p.Problem == best.Problem && p.Answer < best.Answer) {
			best, found = p, true
		}
	}
	if found {
		emit(slot, best)
	}
}

// Batch groups slotted prompts into elements of per prompts each (slot /
// per), so that one sampling element keeps many trajectories in flight.
//
//	PCollection<KV<int, schemas.Prompt>> -> PCollection<KV<int, []schemas.Prompt>> (a GroupByKey result)
func Batch(s beam.Scope, per int, slotted beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Batch")
	if per < 1 {
		panic(fmt.Sprintf("rollout.Batch: %d prompts per batch must be at least 1", per))
	}
	return beam.GroupByKey(s, beam.ParDo(s, &batchKeyFn{Per: per}, slotted))
}

type batchKeyFn struct {
	Per int `json:"per"`
}

func (f *batchKeyFn) ProcessElement(slot int, p schemas.Prompt) (int, schemas.Prompt) {
	return slot / f.Per, p
}

// Slotted keys prompts by their position: the input of Batch for prompts
// that were chosen outside the pipeline (a task's generated prompts).
//
//	() -> PCollection<KV<int, schemas.Prompt>>
func Slotted(s beam.Scope, prompts []schemas.Prompt) beam.PCollection {
	s = s.Scope("rollout.Slotted")
	idx := make([]int, len(prompts))
	for i := range idx {
		idx[i] = i
	}
	return beam.ParDo(s, &slotFn{Prompts: prompts}, beam.CreateList(s, idx))
}

type slotFn struct {
	Prompts []schemas.Prompt `json:"prompts"`
}

func (f *slotFn) ProcessElement(_ context.Context, i int) (int, schemas.Prompt) {
	return i, f.Prompts[i]
}
