package runconfig

// Retained is the set of checkpoints a run keeps under policy p, of the
// committed ones (steps, ascending): checkpoint 0 (the initial policy:
// the warm start, the reference of the KL term, the chat template), the
// newest p.KeepLast, those of steps that are multiples of p.KeepEvery, the
// newest full one (what a resumed run starts from: full reports which are
// full) and those open reports still sample a step not yet committed. With
// p.KeepLast 0 every checkpoint is kept.
func (p Checkpoint) Retained(steps []int64, full, open func(int64) bool) map[int64]bool {
	keep := map[int64]bool{}
	for i, k := range steps {
		keep[k] = p.KeepLast == 0 || k == 0 || i >= len(steps)-p.KeepLast ||
			(p.KeepEvery > 0 && k%p.KeepEvery == 0) || open(k)
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if full(steps[i]) {
			keep[steps[i]] = true
			break
		}
	}
	return keep
}
