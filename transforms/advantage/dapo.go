package advantage

// AllEqual reports whether all rewards of a group are equal (exactly), so
// that every advantage is zero and DAPO's dynamic sampling drops the group.
// A group of zero or one rewards is all equal.
func AllEqual(rewards []float32) bool {
	for _, r := range rewards[min(1, len(rewards)):] {
		if r != rewards[0] {
			return false
		}
	}
	return true
}

// GroupFilter applies DAPO's dynamic sampling and counts its decisions. It
// is not safe for concurrent use; give each worker its own and Merge them.
type GroupFilter struct {
	Kept    int64 // groups with at least two different rewards
	Dropped int64 // groups whose rewards are all equal
}

// Keep reports whether a group should be trained on (its rewards are not
// all equal) and counts the decision.
func (f *GroupFilter) Keep(rewards []float32) bool {
	if AllEqual(rewards) {
		f.Dropped++
		return false
	}
	f.Kept++
	return true
}

// Merge adds the counts of another filter.
func (f *GroupFilter) Merge(o GroupFilter) {
	f.Kept += o.Kept
	f.Dropped += o.Dropped
}

// DropRate is the fraction of groups dropped (0 when none were seen).
func (f GroupFilter) DropRate() float64 {
	total := f.Kept + f.Dropped
	if total == 0 {
		return 0
	}
	return float64(f.Dropped) / float64(total)
}

// OverlongPenalty is the soft overlong punishment of DAPO (Yu et al. 2025,
// arXiv:2503.14476) for a response of length tokens with budget maxLen and
// a penalty zone of the last cache tokens:
//
//	0                                if length <= maxLen - cache
//	(maxLen - cache - length) / cache if maxLen - cache < length <= maxLen
//	-1                               if length > maxLen
//
// It is added to the reward. A cache of 0 gives the hard penalty (-1 past
// maxLen only); maxLen <= 0 disables the penalty.
func OverlongPenalty(length, maxLen, cache int) float32 {
	if maxLen <= 0 {
		return 0
	}
	if cache < 0 {
		cache = 0
	}
	if cache > maxLen {
		cache = maxLen
	}
	switch {
	case length > maxLen:
		return -1
	case length <= maxLen-cache:
		return 0
	}
	return float32(float64(maxLen-cache-length) / float64(cache))
}
