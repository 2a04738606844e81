package eval

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
)

// TestShippedConfigsResolveAsBefore pins the resolved sampling of the
// shipped eval configurations, and the fingerprint of each of their
// benchmarks, to what the build before Sampling embedded sampling.Params
// wrote: its reports read the same and its runs resume.
func TestShippedConfigsResolveAsBefore(t *testing.T) {
	for name, want := range map[string]struct {
		sampling     string
		fingerprints map[string]string
	}{
		"eval.yaml": {`{"samples":0,"temperature":1,"top_p":1,"top_k":0,"max_tokens":16384,"seed":0,"stop":null}`, map[string]string{
			"aime24": "480434c7ed2b3e0e191727d3", "aime25": "1d8944272ade4acec0eec156", "amc23": "91dfa5c1b097fb90591c3118",
			"math500": "c66eae8807e1fdfe1f873ead", "gsm8k": "9c2f6e0085531ff7c6656ed3", "mbpp_sanitized": "c9b7130f9ee2e7b0c6268335",
			"mbpp": "affffc77d8cda85c5f23a77a", "humaneval": "7063e6f1153bc93decf68242"}},
		"eval-quick.yaml": {`{"samples":2,"temperature":1,"top_p":1,"top_k":0,"max_tokens":64,"seed":0,"stop":null}`, map[string]string{
			"aime24": "4d758c3a0237eff2741483f0", "math500": "086d030ae79656a6f45a413f", "gsm8k": "8db9b75516c82e5f567386ac",
			"mbpp_sanitized": "65179b3eb28e97087c60b30c", "humaneval": "bb721bc046f3fc364956d3f4"}},
	} {
		c, err := evalconfig.Load(context.Background(), filepath.Join("..", "..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		c.DataDir = "/data" // the fingerprints hold the files' paths
		c = c.WithDefaults()
		got, err := json.Marshal(c.Sampling)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want.sampling {
			t.Errorf("%s: sampling %s, want %s", name, got, want.sampling)
		}
		if len(c.Benchmarks) != len(want.fingerprints) {
			t.Errorf("%s: %d benchmarks, want %d", name, len(c.Benchmarks), len(want.fingerprints))
		}
		for _, b := range c.Benchmarks {
			r, err := c.Resolve(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := fingerprint(c, r); got != want.fingerprints[b.Key()] {
				t.Errorf("%s: benchmark %s: fingerprint %s, want %s", name, b.Key(), got, want.fingerprints[b.Key()])
			}
		}
	}
}
