package collective

import (
	"errors"
	"strings"
	"testing"
)

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseEnvTorchrun(t *testing.T) {
	e, err := ParseEnv(getenv(map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Env{Rank: 2, WorldSize: 4, LocalRank: 1, MasterAddr: "10.1.2.3", MasterPort: 29500, Source: "torchrun"}
	if e != want {
		t.Fatalf("got %+v, want %+v", e, want)
	}
	if e.StoreAddr() != "10.1.2.3:29500" {
		t.Fatalf("StoreAddr %q", e.StoreAddr())
	}
}

// Under torchrun its agent holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
// and the ranks' store takes the next port; AIPO_STORE_PORT overrides both.
func TestParseEnvStorePort(t *testing.T) {
	base := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		env  map[string]string
		port int
		err  string
	}{
		{base, 29500, ""},
		{with("TORCHELASTIC_USE_AGENT_STORE", "True"), 29501, ""},
		{with("TORCHELASTIC_USE_AGENT_STORE", "False"), 29500, ""},
		{with("TORCHELASTIC_USE_AGENT_STORE", "True", "AIPO_STORE_PORT", "40000"), 40000, ""},
		{with("AIPO_STORE_PORT", "x"), 0, "AIPO_STORE_PORT"},
		{with("AIPO_STORE_PORT", "70000"), 0, "AIPO_STORE_PORT"},
		{with("TORCHELASTIC_USE_AGENT_STORE", "True", "MASTER_PORT", "65535"), 0, "lower --master-port"},
	} {
		e, err := ParseEnv(getenv(c.env))
		switch {
		case c.err == "" && (err != nil || e.MasterPort != c.port):
			t.Errorf("%v: port %d, %v; want %d", c.env, e.MasterPort, err, c.port)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: %v, want an error naming %q", c.env, err, c.err)
		}
	}
}

func TestParseEnvSlurm(t *testing.T) {
	e, err := ParseEnv(getenv(map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}))
	if err != nil {
		t.Fatal(err)
	}
	if e.Rank != 3 || e.WorldSize != 8 || e.LocalRank != 3 || e.Source != "slurm" {
		t.Fatalf("got %+v", e)
	}
	// torchrun's variables win when both are present.
	e, err = ParseEnv(getenv(map[string]string{"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "MASTER_ADDR": "h", "MASTER_PORT": "1"}))
	if err != nil || e.Rank != 1 || e.WorldSize != 2 || e.Source != "torchrun" {
		t.Fatalf("got %+v, %v", e, err)
	}
}

func TestParseEnvErrors(t *testing.T) {
	ok := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
	for _, c := range []struct {
		name    string
		change  map[string]string
		wantVar string
		wantMsg string
	}{
		{"rank too big", map[string]string{"RANK": "2"}, "RANK", "give each process a distinct rank below WORLD_SIZE"},
		{"negative rank", map[string]string{"RANK": "-1"}, "RANK", "[0, 2)"},
		{"world size zero", map[string]string{"WORLD_SIZE": "0"}, "WORLD_SIZE", "at least one rank"},
		{"world size missing", map[string]string{"WORLD_SIZE": ""}, "WORLD_SIZE", "torchrun"},
		{"rank not a number", map[string]string{"RANK": "one"}, "RANK", "not an integer"},
		{"master addr missing", map[string]string{"MASTER_ADDR": ""}, "MASTER_ADDR", "rank 0's host name"},
		{"master port missing", map[string]string{"MASTER_PORT": ""}, "MASTER_PORT", "free TCP port"},
		{"master port range", map[string]string{"MASTER_PORT": "70000"}, "MASTER_PORT", "1-65535"},
		{"slurm rank too big", map[string]string{"RANK": "", "WORLD_SIZE": "", "SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "SLURM_PROCID", "below SLURM_NTASKS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range ok {
				m[k] = v
			}
			for k, v := range c.change {
				m[k] = v
			}
			_, err := ParseEnv(getenv(m))
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("got %v, want an *EnvError", err)
			}
			if ee.Var != c.wantVar || !strings.Contains(err.Error(), c.wantMsg) || !strings.Contains(err.Error(), c.wantVar) {
				t.Fatalf("got %q (var %s), want var %s and %q", err, ee.Var, c.wantVar, c.wantMsg)
			}
		})
	}
}
