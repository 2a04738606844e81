// Package kinds links every collaborator kind into a program: import it for
// its side effect before calling collab.NewSet.
//
//	import _ "github.com/aipo-rl/aipo/transforms/collab/kinds"
package kinds

import (
	// Register builtin-demo, openai and grpc.
	_ "github.com/aipo-rl/aipo/transforms/collab/builtin"
	_ "github.com/aipo-rl/aipo/transforms/collab/openai"
	_ "github.com/aipo-rl/aipo/transforms/collab/rpc"
)
