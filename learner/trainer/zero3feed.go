package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/model"
)

// A pass at ZeRO stage 3 is two goroutines: the pass itself, which asks
// for each unit's weights and hands over each unit's gradient in the
// order of model.UnitPlan, and the pass's exchanges (passFeed.run), which
// make the group's collective calls in one fixed order that every rank
// derives from the plan alone: the gathers of the first two units the
// pass reads, then, as the pass reaches each event of the plan, the
// gather of the unit it will read after the next one (when it begins to
// read a unit) or the reduction of the unit's gradient (when it hands it
// over). The pass waits only for a gather issued before the event it
// has reached, so the two never wait for each other in a circle; at most
// two units' weights are gathered at once (the one the pass reads and
// the next), and the pass goes on while one unit's gradient at most is
// still being exchanged. A rank with no micro-batch in a slot runs the
// same exchanges without a pass (shadow), adding nothing to the
// gradients. At stage 2 on the CPU (zero3.whole) the model reads its own
// weights and the exchanges of the gradients are all there is.

// residentMemory counts the bytes a stage-2 or stage-3 rank holds for its
// weights, gradients and moments: what it keeps (fixed: its share of the
// weights and moments, and at stage 2 the model's whole weights), and
// what its steps and passes allocate (the reduced gradient or the sums
// that stand for it, gathered units, units' gradients, the exchanges'
// buffers), with the peak since it joined.
type residentMemory struct {
	fixed int64
	held  atomic.Int64
	peak  atomic.Int64
}

func (m *residentMemory) add(bytes int64) {
	now := m.held.Add(bytes)
	for {
		p := m.peak.Load()
		if now <= p || m.peak.CompareAndSwap(p, now) {
			return
		}
	}
}

func (m *residentMemory) reset() {
	m.held.Store(m.fixed)
	m.peak.Store(m.fixed)
}

// feedItem is one collective call of a pass: the gather of the weights of
// the plan's use-th unit read, or the reduction of unit's gradient; after
// is the index of the plan event the pass must have reached first (-1:
// none).
type feedItem struct {
	gather bool
	use    int
	unit   int
	after  int
}

// passFeed is one pass's exchanges.
type passFeed struct {
	z       *zero3
	comm    collective.Comm
	ctx     context.Context
	plan    []model.UnitEvent
	shadow  bool
	has     []bool    // the slot's ranks (those with a shard in it) that add a gradient in this pass
	leaf    []float32 // where the owner's slot sums of its elements go (nil: no gradient)
	add     bool      // the sums are added into leaf (the tree's kept sum) rather than written
	uses    []int     // the unit of each use, in order
	weights []chan []float32

	mu      sync.Mutex
	cond    *sync.Cond
	reached int         // plan events the pass has reached
	grads   [][]float32 // unit gradients handed over, not yet reduced
	pending int         // how many: the pass waits while more than one is
	err     error       // the first failure
	next    int         // the next use the pass will ask for
	held    []float32   // the weights of the unit the pass reads
	heldU   int         // its unit
	done    chan struct{}
}

// beginPass starts the exchanges of one pass (train: a training pass,
// its gradients reduced into leaf; shadow: this rank runs no pass).
func (z *zero3) beginPass(ctx context.Context, comm collective.Comm, cfg model.Config, train, shadow bool, has []bool, leaf []float32, add bool) *passFeed {
	plan := model.UnitPlan(cfg, train)
	if train && z.frozen {
		plan = model.FrozenUnitPlan(cfg) // (a LoRA policy's base)
	}
	p := &passFeed{z: z, comm: comm, ctx: ctx, plan: plan, shadow: shadow, has: has, leaf: leaf, add: add,
		grads: make([][]float32, len(z.units)), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	var items []feedItem
	for i, e := range p.plan {
		if e.Grad {
			items = append(items, feedItem{unit: e.Unit, after: i})
			continue
		}
		k := len(p.uses)
		p.uses = append(p.uses, e.Unit)
		if k == 0 {
			continue
		}
		// Reaching use k (the pass reads unit k and no longer k-1's).
		items = append(items, feedItem{gather: true, use: k + 1, after: i})
	}
	head := []feedItem{{gather: true, use: 0, after: -1}, {gather: true, use: 1, after: -1}}
	items = append(head, items...)
	if z.whole {
		// The model reads its own weights: the exchanges alone.
		items = slices.DeleteFunc(items, func(it feedItem) bool { return it.gather })
	}
	p.weights = make([]chan []float32, len(p.uses))
	for i := range p.weights {
		p.weights[i] = make(chan []float32, 1)
	}
	if shadow {
		p.reached = len(p.plan)
	}
	z.mu.Lock()
	z.pass = p
	z.mu.Unlock()
	go p.run(items)
	return p
}

// run makes the pass's collective calls in order.
func (p *passFeed) run(items []feedItem) {
	defer close(p.done)
	for _, it := range items {
		if it.gather && it.use >= len(p.uses) {
			continue
		}
		p.mu.Lock()
		for p.reached <= it.after && p.err == nil {
			p.cond.Wait()
		}
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return
		}
		if it.gather {
			w, err := p.z.gatherUnit(p.ctx, p.comm, p.uses[it.use])
			if err != nil {
				p.fail(fmt.Errorf("trainer: gathering the weights of unit %d: %w", p.uses[it.use], err))
				return
			}
			if p.shadow {
				p.z.releaseWeights(p.uses[it.use], w)
				continue
			}
			p.weights[it.use] <- w
			continue
		}
		p.mu.Lock()
		g := p.grads[it.unit]
		p.grads[it.unit] = nil
		p.mu.Unlock()
		if err := p.z.reduceUnit(p.ctx, p.comm, it.unit, g, p.has, p.leaf, p.add); err != nil {
			p.fail(fmt.Errorf("trainer: reducing the gradient of unit %d: %w", it.unit, err))
			return
		}
		if g != nil {
			p.mu.Lock()
			p.pending--
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	}
}

func (p *passFeed) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// reach records that the pass reached plan event i.
func (p *passFeed) reach(i int) {
	p.mu.Lock()
	p.reached = max(p.reached, i+1)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// eventIndex is the index in the plan of the k-th use.
func (p *passFeed) eventIndex(k int) int {
	for i, e := range p.plan {
		if !e.Grad {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return len(p.plan)
}

// use is model.UnitFeed.Use for this pass.
func (p *passFeed) use(u int) ([]float32, error) {
	k := p.next
	if k >= len(p.uses) || p.uses[k] != u {
		return nil, fmt.Errorf("trainer: the pass read unit %d where its plan reads %v (use %d)", u, p.uses, k)
	}
	p.next++
	p.drop()
	p.reach(p.eventIndex(k))
	if w := p.z.keptWeights(u); w != nil {
		// Kept from an earlier gather: the pass does not wait behind the
		// exchanges queued before this use's item (a gradient's
		// reduction, which waits for the slowest rank), as it need not
		// for weights it holds. The item sends them too; finish drains it.
		p.held, p.heldU = w, u
		return w, nil
	}
	select {
	case w := <-p.weights[k]:
		p.held, p.heldU = w, u
		return w, nil
	case <-p.done:
		select {
		case w := <-p.weights[k]:
			p.held, p.heldU = w, u
			return w, nil
		default:
		}
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		if err == nil {
			err = errors.New("trainer: the pass's exchanges ended before its weights came")
		}
		return nil, err
	}
}

// drop lets go of the weights the pass read last.
func (p *passFeed) drop() {
	if p.held != nil {
		p.z.releaseWeights(p.heldU, p.held)
		p.held = nil
	}
}

// gradDone is model.UnitFeed.GradDone for this pass.
func (p *passFeed) gradDone(u int, g []float32) error {
	at := -1
	for i, e := range p.plan {
		if e.Grad && e.Unit == u {
			at = i
		}
	}
	if at < 0 {
		return fmt.Errorf("trainer: the pass handed over the gradient of unit %d, which its plan does not", u)
	}
	p.mu.Lock()
	p.grads[u] = g
	p.pending++
	p.mu.Unlock()
	p.reach(at)
	// The pass goes on while one unit's gradient is being exchanged at
	// most (besides the one it hands over now), so that the gradients
	// it writes faster than the group exchanges them do not pile up.
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.pending > 1 && p.err == nil {
		p.cond.Wait()
	}
	return p.err
}

// finish waits for the pass's exchanges after the pass ended (passErr is
// its failure, which stops them) and returns the first failure.
func (p *passFeed) finish(passErr error) error {
	p.drop()
	if passErr != nil {
		p.fail(passErr)
	} else {
		p.reach(len(p.plan) - 1)
	}
	<-p.done
	for k, ch := range p.weights {
		select {
		case w := <-ch:
			p.z.releaseWeights(p.uses[k], w)
		default:
		}
	}
	for u, g := range p.grads {
		if g != nil {
			p.z.mem.add(-4 * int64(len(g)))
			p.grads[u] = nil
		}
	}
	p.z.mu.Lock()
	p.z.pass = nil
	p.z.mu.Unlock()
	if passErr != nil {
		return passErr
	}
	return p.err
}

// current is the pass in progress.
func (z *zero3) current() (*passFeed, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.pass == nil {
		return nil, errors.New("trainer: a pass over the sharded policy outside a data-parallel step (ZeRO stage 3 runs its passes through RLStepDP)")
	}
	return z.pass, nil
}

// Use is model.UnitFeed.Use: the weights of unit u for the pass in
// progress.
func (z *zero3) Use(u int) ([]float32, error) {
	p, err := z.current()
	if err != nil {
		return nil, err
	}
	return p.use(u)
}

// NewGrad is model.UnitFeed.NewGrad.
func (z *zero3) NewGrad(u int) []float32 {
	n := z.units[u].Len
	z.mem.add(4 * int64(n))
	return make([]float32, n)
}

// GradDone is model.UnitFeed.GradDone.
func (z *zero3) GradDone(u int, g []float32) error {
	p, err := z.current()
	if err != nil {
		return err
	}
	return p.gradDone(u, g)
}

// releaseWeights accounts for unit u's gathered weights w, which the pass
// let go (a group of one reads its own share in place: nothing was
// gathered; a kept unit's stay until dropKept).
func (z *zero3) releaseWeights(u int, w []float32) {
	if z.n > 1 && !z.keeps(u) {
		z.mem.add(-4 * int64(len(w)))
	}
}

// keptWeights is unit u's gathered weights when they are kept and have
// been gathered (nil otherwise). Only the feed's goroutine sets them, in
// the order of its items, and they go only between passes (dropKept), so
// whether an item gathers does not depend on when the pass asks.
func (z *zero3) keptWeights(u int) []float32 {
	if !z.keeps(u) {
		return nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.kept[u]
}

// keeps says unit u's gathered weights are kept between passes.
func (z *zero3) keeps(u int) bool { return z.keep != nil && z.keep[u] }

// dropKept lets go of the gathered weights the passes kept: the weights
// change (the optimiser's step, new weights taken).
func (z *zero3) dropKept() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for u, w := range z.kept {
		if w != nil {
			z.mem.add(-4 * int64(len(w)))
			z.kept[u] = nil
		}
	}
}

// KeptUnits is the units of units whose gathered weights a stage-3 rank
// keeps between passes within budget bytes (DPConfig.KeepGathered): in
// the model's order, each whose float32 weights fit in what the units
// before it left of the budget. Nil for a budget of 0.
func KeptUnits(units []model.Span, budget int64) []bool {
	if budget <= 0 {
		return nil
	}
	keep := make([]bool, len(units))
	for u, s := range units {
		if b := 4 * int64(s.Len); b <= budget {
			keep[u] = true
			budget -= b
		}
	}
	return keep
}

// gatherUnit all-gathers unit u's weights from their owners (a kept
// unit's once, until dropKept).
func (z *zero3) gatherUnit(ctx context.Context, comm collective.Comm, u int) ([]float32, error) {
	n, rank := comm.Size(), comm.Rank()
	lo, hi := z.run(u, rank)
	mine := z.master[z.at[u] : z.at[u]+hi-lo]
	if n == 1 {
		return mine, nil
	}
	if w := z.keptWeights(u); w != nil {
		return w, nil
	}
	counts := make([]int, n)
	for r := range n {
		a, b := z.run(u, r)
		counts[r] = b - a
	}
	w := make([]float32, z.units[u].Len)
	z.mem.add(4 * int64(len(w)))
	z.sent.Add(4 * int64(len(mine)) * int64(n-1))
	if z.stop != nil {
		z.stop.enter(rank, z.opt.Steps(), "gather", u)
	}
	if err := comm.AllGather(ctx, collective.Float32s(mine), collective.Float32s(w), counts); err != nil {
		z.mem.add(-4 * int64(len(w)))
		return nil, err
	}
	z.rankOrder(u, w, true)
	if z.keeps(u) {
		z.mu.Lock()
		z.kept[u] = w
		z.mu.Unlock()
	}
	return w, nil
}

// reduceUnit sends every owner its elements of g (unit u's gradient of
// this rank's shard; nil when the rank adds none, has[rank] false),
// receives every rank's gradient of its own elements (has[r]: rank r
// sends one), sums the slot's shards' (the first len(has) ranks') in rank
// order in the slot's subtree and writes
// the sum into leaf at the unit's place, or adds it there (add: the sum
// the tree would add to it at once, elementwise, as sumTree does).
func (z *zero3) reduceUnit(ctx context.Context, comm collective.Comm, u int, g []float32, has []bool, leaf []float32, add bool) error {
	n, rank := comm.Size(), comm.Rank()
	lo, hi := z.run(u, rank)
	m := hi - lo
	defer func() {
		if g != nil {
			z.mem.add(-4 * int64(len(g)))
		}
	}()
	dst := leaf[z.at[u] : z.at[u]+m]
	put := func(s []float32) {
		switch {
		case add:
			addInto(dst, s, false)
		case s == nil:
			clear(dst)
		default:
			copy(dst, s)
		}
	}
	if n == 1 {
		put(g)
		return nil
	}
	// has[r]: rank r adds a gradient (ranks past len(has) have no shard
	// in the slot).
	adds := func(r int) bool { return r < len(has) && has[r] }
	send, recv := make([]int, n), make([]int, n)
	total := 0
	for r := range n {
		if adds(rank) {
			a, b := z.run(u, r)
			send[r] = b - a
		}
		if adds(r) {
			recv[r] = m
			total += m
		}
	}
	buf := make([]float32, total)
	z.mem.add(4 * int64(total))
	defer z.mem.add(-4 * int64(total))
	var sendBuf []float32
	if adds(rank) {
		sendBuf = g
		z.rankOrder(u, g, false)
		z.sent.Add(4 * int64(len(g)-m))
	}
	if z.stop != nil {
		z.stop.enter(rank, z.opt.Steps(), "reduce", u)
	}
	if err := comm.AllToAll(ctx, collective.Float32s(sendBuf), send, collective.Float32s(buf), recv); err != nil {
		return err
	}
	var t sumTree
	k := 0
	for r := range has {
		if !has[r] {
			t.push(nil)
			continue
		}
		t.push(buf[k*m : (k+1)*m])
		k++
	}
	put(t.sum())
	return nil
}
