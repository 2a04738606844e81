package trainer

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// owner3 is the rank that computes virtual shard s at stage 3: s mod n,
// in time slot s div n (see zero3).
func owner3(s, n int) int { return s % n }

// ownerZero3 is owner3 for a group of n.
func ownerZero3(n int) func(s int) int { return func(s int) int { return owner3(s, n) } }

// ownerStage1 is owner (stage 1's contiguous runs) for v shards among n.
func ownerStage1(v, n int) func(s int) int { return func(s int) int { return owner(s, v, n) } }

// scoreZero3 computes pi_old (the policy's log-probabilities) of the
// samples of this rank's shards into old: every rank runs as many passes
// as the rank with the most micro-batches, the passes it lacks as shadows
// (their gathers alone), so that the group's gathers stay in step.
func (l *Learner) scoreZero3(ctx context.Context, groups [][][]int, seqs []Sequence, budget int, old [][]float32) error {
	dp := l.DP
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	if !dp.z3.whole {
		return l.scoreSharded(ctx, dp.z3, l.Policy, l.policy(), groups, seqs, budget, old, ownerZero3(n))
	}
	// The model holds its weights: each rank scores its own.
	for mb := range groups {
		for s, order := range groups[mb] {
			if owner3(s, n) == rank {
				if err := logProbsInto(old, l.policy(), seqs, order, budget); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scoreSharded computes the log-probabilities under m, whose weights z
// shards (the policy's, or the frozen reference's: zero3ref.go; a LoRA
// policy's frozen base, lora.go), of the samples of this rank's shards
// (ownerOf: the rank that computes each shard) into out, through c, m's
// passes: every rank runs as many passes as the rank with the most
// micro-batches, the passes it lacks as shadows (their gathers alone),
// so that the group's gathers stay in step.
func (l *Learner) scoreSharded(ctx context.Context, z *zero3, m *model.Model, c Compute, groups [][][]int, seqs []Sequence, budget int, out [][]float32, ownerOf func(s int) int) error {
	dp := l.DP
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	counts := make([]int, n)
	var mine []microBatch
	for mb := range groups {
		for s, order := range groups[mb] {
			r := ownerOf(s)
			k := pack(seqs, order, budget)
			counts[r] += len(k)
			if r == rank {
				mine = append(mine, k...)
			}
		}
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	for i := range most {
		if i >= len(mine) {
			if err := z.beginPass(ctx, dp.Comm, m.Config(), false, true, nil, nil, false).finish(nil); err != nil {
				return err
			}
			continue
		}
		mb := mine[i]
		feed := z.beginPass(ctx, dp.Comm, m.Config(), false, false, nil, nil, false)
		all, err := c.Run(mb.batch, nil)
		m.EndShardedPass()
		if err := feed.finish(err); err != nil {
			// The others wait for this rank's gathers: tell them.
			dp.Comm.Abort(err)
			return fmt.Errorf("trainer: pi_old: %w", err)
		}
		mb.split(out, seqs, all)
	}
	return nil
}

// miniBatchZero3 is miniBatchDP at stage 3: the rounds and slots of
// zero3's schedule, leaving the reduced gradient of this rank's elements
// in the stage's grad.
func (l *Learner) miniBatchZero3(ctx context.Context, cfg RLConfig, samples []RLSample, seqs []Sequence, shards [][]int, old, ref [][]float32) (miniBatchPart, error) {
	dp := l.DP
	z := dp.z3
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	mbs, inputs, counts, total, names, err := planShards(cfg, samples, seqs, shards, old, ref)
	if err != nil || total == 0 {
		return miniBatchPart{}, err
	}
	// Each shard's micro-batches with a token to train: its rounds.
	trained := make([][]int, v)
	rounds := 0
	for s := range v {
		for b, x := range counts[s] {
			if x != 0 {
				trained[s] = append(trained[s], b)
			}
		}
		rounds = max(rounds, len(trained[s]))
	}
	parts := make([]miniBatchPart, v)
	for s := range parts {
		parts[s].metrics = map[string]float64{}
	}
	c := l.policy()
	mc := l.Policy.Config()
	// The reduced gradient of the last mini-batch goes: the rounds' sum
	// takes its place.
	z.mem.add(-4 * int64(len(z.grad)))
	z.grad = nil
	var total3 []float32 // the rounds' sums, added in round order
	var tree sumTree
	var treeHeld int64 // what tree, total3 and a leaf being filled hold
	account := func(leaf int) {
		k := len(z.master) * leaf
		for _, nd := range tree.stack {
			if nd.sum != nil {
				k += len(z.master)
			}
		}
		if total3 != nil {
			k += len(z.master)
		}
		z.mem.add(4*int64(k) - treeHeld)
		treeHeld = 4 * int64(k)
	}
	slots := (v + n - 1) / n
	for j := range rounds {
		tree = sumTree{}
		// With one slot a round (as many ranks as shards, or more), the
		// round's sum is its slot's: from the second round on the owner
		// adds it into the rounds' sum unit by unit, the addition
		// addInto would make of the whole sum, so no round takes a
		// buffer of its own beside the rounds' sum.
		into := slots == 1 && total3 != nil
		for t := range slots {
			// The slot's shards: n of them, or the rest of the v.
			size := min(n, v-t*n)
			has := make([]bool, n)
			any := false
			for r := range size {
				has[r] = j < len(trained[t*n+r])
				any = any || has[r]
			}
			if !any {
				tree.stack = append(tree.stack, treeNode{size, nil})
				tree.merge()
				continue
			}
			// A slot whose sum the tree would add at once to the sum on
			// top of its stack (a node of as many shards) is added there
			// unit by unit; any other gets a buffer of its own.
			top := len(tree.stack) - 1
			add := into || top >= 0 && tree.stack[top].leaves == size && tree.stack[top].sum != nil
			var leaf []float32
			switch {
			case into:
				leaf = total3
			case add:
				leaf = tree.stack[top].sum
			default:
				leaf = make([]float32, len(z.master))
				account(1)
			}
			push := func() {
				switch {
				case into:
					return
				case add:
					tree.stack[top].leaves = 2 * size
					tree.merge()
				default:
					tree.stack = append(tree.stack, treeNode{size, leaf})
					tree.merge()
				}
				account(0)
			}
			s := t*n + rank
			if !has[rank] {
				if err := z.beginPass(ctx, dp.Comm, mc, true, true, has[:size], leaf, add).finish(nil); err != nil {
					return miniBatchPart{}, err
				}
				push()
				continue
			}
			b := trained[s][j]
			w := counts[s][b] / total
			feed := z.beginPass(ctx, dp.Comm, mc, true, false, has[:size], leaf, add)
			out, err := runMicroBatch(c, cfg.Loss, mbs[s][b], inputs[s][b], w)
			l.Policy.EndShardedPass()
			if err := feed.finish(err); err != nil {
				dp.Comm.Abort(err)
				return miniBatchPart{}, err
			}
			// Every unit's exchange but the embedding's (the last)
			// began while the backward pass went on.
			dp.Overlapped += int64(len(z.units) - 1)
			p := &parts[s]
			p.loss += w * out.Loss
			addMetrics(p.metrics, out.Metrics)
			p.micro++
			p.tokens += len(mbs[s][b].scored)
			push()
		}
		if into {
			continue // the slot's passes added the round's sum
		}
		sum := tree.sum()
		tree = sumTree{}
		if total3 == nil {
			total3 = sum
		} else {
			total3 = addInto(total3, sum, true)
		}
		account(0)
	}
	if total3 == nil {
		total3 = make([]float32, len(z.master))
		z.mem.add(4 * int64(len(total3)))
	}
	// total3 is counted (treeHeld) from here on as the held gradient.
	z.grad = total3
	dp.Sent += z.sent.Swap(0)
	return dp.gatherPartsOf(ctx, parts, names, func(s int) int { return owner3(s, n) })
}
