package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	v := versionText()
	if !strings.HasPrefix(v, "aipo ") || !strings.Contains(v, " commit ") || !strings.Contains(v, runtime.Version()) {
		t.Errorf("version %q, want aipo <version> commit <rev> ..., %s", v, runtime.Version())
	}
	if code := dispatch([]string{"version"}); code != 0 {
		t.Errorf("aipo version exited %d", code)
	}
	if code := dispatch([]string{"version", "extra"}); code != 2 {
		t.Errorf("aipo version extra exited %d, want 2", code)
	}
}
