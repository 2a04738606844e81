//go:build !cgo || purego

package gloo

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/learner/collective"
)

// Available reports whether this binary has the Gloo backend.
func Available() error {
	return fmt.Errorf("collective: gloo: %w: this binary was built without cgo (CGO_ENABLED=0 or -tags purego); build with cgo and libgloo-dev installed (scripts/setup.sh build) to use Gloo", collective.ErrUnavailable)
}

// New fails: this binary has no Gloo backend.
func New(ctx context.Context, g *collective.Group) (collective.Comm, error) {
	return nil, Available()
}
