package main

import (
	"testing"

	"github.com/aipo-rl/aipo/learner/cuda"
)

func TestServeFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},                             // neither --checkpoint nor --watch
		{"--checkpoint", "x", "extra"}, // stray argument
		{"--checkpoint", "x", "--tls-cert", "c.pem"}, // cert without key
		{"--checkpoint", "x", "--http", "0.0.0.0:1"}, // public without token
		{"--checkpoint", "x", "--device", "tpu"},     // unknown device
		{"--checkpoint", "x", "--max-body-bytes", "-1"},
		{"--checkpoint", "x", "--body-timeout", "-1s"},
		{"--checkpoint", "x", "--max-client-requests", "-2"},
		{"--checkpoint", "x", "--lora-name", "a"}, // an adapter name without --lora
		{"--watch", "run", "--lora", "adapter"},   // an adapter without its base
	} {
		if code := report("serve", runServe(args)); code != 2 {
			t.Errorf("aipo serve %q exited %d, want 2 (usage error)", args, code)
		}
	}
	if code := report("serve", runServe([]string{"--checkpoint", t.TempDir(), "--grpc", "", "--http", "127.0.0.1:0"})); code != 1 {
		t.Errorf("aipo serve of an empty directory exited %d, want 1", code)
	}
	if _, err := cuda.Driver(); err != nil {
		// Without a GPU, --device cuda fails before anything is loaded.
		if code := report("serve", runServe([]string{"--checkpoint", t.TempDir(), "--device", "cuda", "--grpc", "", "--http", "127.0.0.1:0"})); code != 1 {
			t.Errorf("aipo serve --device cuda without a GPU exited %d, want 1", code)
		}
	}
}
