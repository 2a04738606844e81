package runconfig

// learner.backend is validated against the names registered in
// learner/backend; the tests link learner/cuda, as cmd/aipo does, so that
// "cuda" is one of them.
import _ "github.com/aipo-rl/aipo/learner/cuda"
