//go:build cgo && !purego

package gloo

import "testing"

func TestAvailableWithCgo(t *testing.T) {
	if err := Available(); err != nil {
		t.Fatalf("a cgo build has the Gloo backend, but Available says %v", err)
	}
}
