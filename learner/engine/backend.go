package engine

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// Backend is the model an engine samples from: learner/model on the CPU
// (CPU) or a copy of it on an accelerator (learner/cuda's Decoder). Its
// methods are those of model.Model that decoding needs.
type Backend interface {
	// Config is the model's configuration.
	Config() model.Config
	// BytesPerToken is the cache memory of one position.
	BytesPerToken() int
	// NewCache returns an empty attention cache for one sequence.
	NewCache() Cache
	// Extend feeds tokens[i] to caches[i] for every i in one batched pass
	// and returns the logits after each sequence's last new token, [B, V]
	// row-major, written into dst when it has the capacity (as
	// model.Model.Extend). On error no cache is changed.
	Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error)
}

// Cache is one sequence's attention state in a Backend (model.KVCache on
// the CPU).
type Cache interface {
	Len() int
	Tokens() []int32
	Truncate(n int)
	Bytes() int
}

// CPU is the Backend of m itself.
func CPU(m *model.Model) Backend { return cpuBackend{m} }

type cpuBackend struct{ m *model.Model }

func (b cpuBackend) Config() model.Config { return b.m.Config() }
func (b cpuBackend) BytesPerToken() int   { return b.m.BytesPerToken() }
func (b cpuBackend) NewCache() Cache      { return b.m.NewKVCache() }

func (b cpuBackend) Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	kc := make([]*model.KVCache, len(caches))
	for i, c := range caches {
		k, ok := c.(*model.KVCache)
		if !ok {
			return nil, fmt.Errorf("engine: cache %d (%T) was not made by this backend", i, c)
		}
		kc[i] = k
	}
	return b.m.Extend(kc, tokens, dst)
}
