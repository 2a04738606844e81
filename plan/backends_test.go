package plan

// The plans of the GPU sizes name learner.backend cuda, which a binary has
// when it links learner/cuda (cmd/aipo does); no GPU is needed to plan.
import _ "github.com/aipo-rl/aipo/learner/cuda"
