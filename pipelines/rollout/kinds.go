package rollout

// The rollout workers build collaborators from the run configuration; link
// every collaborator kind (built-in, OpenAI-compatible, gRPC) into binaries
// that run this pipeline.
import _ "github.com/aipo-rl/aipo/transforms/collab/kinds"
