package optim

import (
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/par"
)

// Chunk is the elements [Lo, Hi) of parameter Param: the unit of the
// global gradient norm's partial sums (chunkSize elements at most, never
// across parameters) and of a data-parallel group's ownership of the
// optimiser state.
type Chunk struct{ Param, Lo, Hi int }

// Len is the chunk's number of elements.
func (c Chunk) Len() int { return c.Hi - c.Lo }

// Chunks splits params into the chunks Step sums the gradient norm over,
// in order.
func Chunks(params []Param) []Chunk {
	cs := splitChunks(params)
	out := make([]Chunk, len(cs))
	for i, c := range cs {
		out[i] = Chunk{c.param, c.lo, c.hi}
	}
	return out
}

// ChunksOfSizes is Chunks of parameters of these sizes (elements), for a
// planner that has the model's shapes but not its parameters.
func ChunksOfSizes(sizes []int) []Chunk {
	var out []Chunk
	for i, n := range sizes {
		for lo := 0; lo < n; lo += chunkSize {
			out = append(out, Chunk{i, lo, min(lo+chunkSize, n)})
		}
	}
	return out
}

// Partition gives each of n ranks a contiguous run of chunks, balanced by
// elements: rank r owns chunks [bounds[r], bounds[r+1]). A rank may own
// none (more ranks than chunks).
func Partition(chunks []Chunk, n int) []int {
	total := 0
	for _, c := range chunks {
		total += c.Len()
	}
	bounds := make([]int, n+1)
	bounds[n] = len(chunks)
	seen, i := 0, 0
	for r := 1; r < n; r++ {
		// Rank r starts at the first chunk that begins at or after its
		// share of the elements.
		target := total * r / n
		for i < len(chunks) && seen+chunks[i].Len()/2 < target {
			seen += chunks[i].Len()
			i++
		}
		bounds[r] = i
	}
	return bounds
}

// Shard is the AdamW of the chunks one rank owns in a data-parallel group
// that shards the optimiser state (ZeRO stage 1): the moments of those
// chunks alone, updated from their reduced gradients with the same
// arithmetic as AdamW.Step, so that the group's update is bit for bit
// the one process's.
type Shard struct {
	cfg    Config
	steps  int64
	chunks []Chunk
	m, v   [][]float32 // per owned chunk, views of mAll and vAll
	// mAll and vAll hold every owned chunk's moments, the chunks in
	// order (Flat).
	mAll, vAll []float32
}

// NewShard returns the state of chunks (zero moments, no step taken).
func NewShard(cfg Config, chunks []Chunk) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Shard{cfg: cfg, chunks: chunks, m: make([][]float32, len(chunks)), v: make([][]float32, len(chunks))}
	total := 0
	for _, c := range chunks {
		total += c.Len()
	}
	s.mAll, s.vAll = make([]float32, total), make([]float32, total)
	at := 0
	for i, c := range chunks {
		n := c.Len()
		s.m[i], s.v[i] = s.mAll[at:at+n:at+n], s.vAll[at:at+n:at+n]
		at += n
	}
	return s, nil
}

// Flat is every owned chunk's first and second moments, the chunks in
// order, one after the other (Moments' slices are views of them).
func (s *Shard) Flat() (m, v []float32) { return s.mAll, s.vAll }

// Config is the hyper-parameters.
func (s *Shard) Config() Config { return s.cfg }

// SetConfig replaces the hyper-parameters; moments and step count stay.
func (s *Shard) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.cfg = cfg
	return nil
}

// Steps is the number of updates applied.
func (s *Shard) Steps() int64 { return s.steps }

// SetSteps sets the update count (restored from a checkpoint).
func (s *Shard) SetSteps(n int64) { s.steps = n }

// LR is the learning rate of the next update.
func (s *Shard) LR() float64 { return s.cfg.LRAt(s.steps) }

// Chunks are the chunks the shard owns.
func (s *Shard) Chunks() []Chunk { return s.chunks }

// Moments are the first and second moments of owned chunk i.
func (s *Shard) Moments(i int) (m, v []float32) { return s.m[i], s.v[i] }

// Step applies the next update to the owned chunks of params from their
// reduced gradients (grads[i] is chunk i's), clipped by the global norm
// gradNorm of the whole gradient, and reports whether it did: with a norm
// that is not finite nothing changes, as AdamW.Step.
func (s *Shard) Step(params []Param, grads [][]float32, gradNorm float64) (bool, error) {
	if len(grads) != len(s.chunks) {
		return false, fmt.Errorf("optim: %d gradient chunks for a shard of %d", len(grads), len(s.chunks))
	}
	for i, c := range s.chunks {
		if c.Param >= len(params) || c.Hi > len(params[c.Param].Data) || len(grads[i]) != c.Len() {
			return false, fmt.Errorf("optim: shard chunk %d (parameter %d [%d, %d)) does not fit the parameters or its gradient of %d values", i, c.Param, c.Lo, c.Hi, len(grads[i]))
		}
	}
	if math.IsNaN(gradNorm) || math.IsInf(gradNorm, 0) {
		return false, nil
	}
	k := s.cfg.kernelAt(s.steps, gradNorm)
	par.Tasks(len(s.chunks), func(_, i int) {
		c := s.chunks[i]
		k.apply(params[c.Param].Data[c.Lo:c.Hi], grads[i], s.m[i], s.v[i])
	})
	s.steps++
	return true, nil
}
