package main

import (
	"strings"
	"testing"
)

func TestServeBind(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		token bool
		want  string
	}{
		{"127.0.0.1:8000", false, ""},
		{"localhost:8000", false, ""},
		{"[::1]:7070", false, ""},
		{"0.0.0.0:8000", false, "not a loopback address"},
		{"0.0.0.0:8000", true, ""},
		{"8000", false, "must be HOST:PORT"},
	} {
		err := checkServeBind("--http", tc.addr, tc.token)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkServeBind(%q, token %v) = %v; want %q", tc.addr, tc.token, err, tc.want)
		}
	}
}

func TestServeFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},                             // neither --checkpoint nor --watch
		{"--checkpoint", "x", "extra"}, // stray argument
		{"--checkpoint", "x", "--tls-cert", "c.pem"}, // cert without key
		{"--checkpoint", "x", "--http", "0.0.0.0:1"}, // public without token
	} {
		if code := runServe(args); code != 2 {
			t.Errorf("aipo serve %q exited %d, want 2 (usage error)", args, code)
		}
	}
	if code := runServe([]string{"--checkpoint", t.TempDir(), "--grpc", "", "--http", "127.0.0.1:0"}); code != 1 {
		t.Errorf("aipo serve of an empty directory exited %d, want 1", code)
	}
}
