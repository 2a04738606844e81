package engine

import (
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
)

// Backend is the model an engine samples from: learner/model on the CPU
// (CPU) or a copy of it on an accelerator (a learner/backend Device's
// Decoder, such as learner/cuda's). It is backend.Decoder.
type Backend = backend.Decoder

// Cache is one sequence's attention state in a Backend (model.KVCache on
// the CPU).
type Cache = backend.Cache

// CPU is the Backend of m itself.
func CPU(m *model.Model) Backend { return backend.CPUDecoder(m) }
