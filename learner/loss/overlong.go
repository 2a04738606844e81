package loss

// OverlongPenalty is DAPO's soft overlong punishment (arXiv 2503.14476), a
// reward term added to the outcome reward of a response of length
// generated tokens:
//
//	0                                  if length <= maxLen - cache
//	((maxLen - cache) - length) / cache if maxLen - cache < length <= maxLen
//	-1                                 if length > maxLen
//
// The penalty grows linearly from 0 to -1 across the last cache tokens of
// the budget. A cache <= 0 leaves only the hard step at maxLen, and a
// cache larger than maxLen is treated as maxLen.
func OverlongPenalty(length, maxLen, cache int) float32 {
	if length > maxLen {
		return -1
	}
	if cache <= 0 {
		return 0
	}
	if cache > maxLen {
		cache = maxLen
	}
	start := maxLen - cache
	if length <= start {
		return 0
	}
	return float32(float64(start-length) / float64(cache))
}
