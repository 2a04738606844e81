package main

import "testing"

func TestCollaboratorsServeFlagErrors(t *testing.T) {
	none := t.TempDir() + "/none.pem"
	for _, args := range [][]string{
		{},                              // no --config
		{"--config", "c.yaml", "extra"}, // stray argument
		{"--config", "c.yaml", "--addr", "0.0.0.0:7071"},              // public without token
		{"--config", "c.yaml", "--tls-cert", "c.pem"},                 // cert without key
		{"--config", "c.yaml", "--tls-key", "k.pem"},                  // key without cert
		{"--config", "c.yaml", "--tls-cert", none, "--tls-key", none}, // unreadable pair
	} {
		err := runCollaboratorsServe(args)
		if code := report("collaborators serve", err); code != 2 {
			t.Errorf("aipo collaborators serve %q exited %d (%v), want 2 (usage error)", args, code, err)
		}
	}
}
