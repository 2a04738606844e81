//go:build !cgo || purego

package gloo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/collective"
)

// Without cgo the package builds and says why it has no Gloo.
func TestUnavailableWithoutCgo(t *testing.T) {
	c, err := New(context.Background(), nil)
	if c != nil || !errors.Is(err, collective.ErrUnavailable) || !strings.Contains(err.Error(), "built without cgo") {
		t.Fatalf("New: %v, %v; want ErrUnavailable saying the binary has no cgo", c, err)
	}
	if err := Available(); !errors.Is(err, collective.ErrUnavailable) {
		t.Fatalf("Available: %v", err)
	}
}
