package collab

import "hash/fnv"

// DeriveSeed derives the seed of one collaborator call from the run seed and
// the call's coordinates. Equal inputs give equal seeds on every machine.
func DeriveSeed(runSeed uint64, step int64, promptID string, sample, call int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(promptID))
	x := runSeed
	for _, v := range []uint64{uint64(step), h.Sum64(), uint64(sample), uint64(call)} {
		x = splitmix(x ^ splitmix(v))
	}
	return x
}

// splitmix is the SplitMix64 finaliser: a bijective mix of 64 bits.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Uniform returns the i-th independent uniform number in [0,1) drawn from
// seed. Collaborators use i = 0 for the noise decision and i >= 1 for
// choices that follow it.
func Uniform(seed uint64, i uint64) float64 {
	return float64(splitmix(seed^splitmix(i+0x51ed))>>11) / (1 << 53)
}

// IntN returns the i-th independent integer in [0,n) drawn from seed (n > 0).
func IntN(seed uint64, i uint64, n int) int {
	return min(int(Uniform(seed, i)*float64(n)), n-1)
}
