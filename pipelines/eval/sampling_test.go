package eval

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
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
		c, err := LoadConfig(context.Background(), filepath.Join("..", "..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		c.DataDir = "/data" // the fingerprints hold the files' paths
		c = c.withDefaults()
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
			r, err := resolve(b, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := fingerprint(c, r); got != want.fingerprints[b.key()] {
				t.Errorf("%s: benchmark %s: fingerprint %s, want %s", name, b.key(), got, want.fingerprints[b.key()])
			}
		}
	}
}

// TestSamplingKeys reads every key of the sampling section, keeps the
// default temperature when the key is left out and greedy decoding when it
// says 0, round-trips through JSON, and names an unknown key.
func TestSamplingKeys(t *testing.T) {
	c, err := ParseConfig([]byte("sampling: {samples: 3, temperature: 0, top_p: 0.5, top_k: 7, max_tokens: 9, seed: 11, stop: [x]}\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sampling
	if s.Samples != 3 || s.Temperature != 0 || s.TopP != 0.5 || s.TopK != 7 || s.MaxTokens != 9 || s.Seed != 11 || len(s.StopStrings) != 1 || s.StopStrings[0] != "x" {
		t.Errorf("sampling %+v, want every key read", s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Sampling
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Samples != s.Samples || back.Temperature != s.Temperature || back.TopP != s.TopP || back.TopK != s.TopK ||
		back.MaxTokens != s.MaxTokens || back.Seed != s.Seed || len(back.StopStrings) != 1 {
		t.Errorf("JSON %s read back as %+v, want %+v", b, back, s)
	}
	for _, y := range []string{"out: o\n", "sampling: {samples: 2}\n", "sampling:\n"} {
		c, err := ParseConfig([]byte(y), "t")
		if err != nil || c.Sampling.Temperature != DefaultTemperature {
			t.Errorf("%q: temperature %v, err %v; want the default %v", y, c.Sampling.Temperature, err, DefaultTemperature)
		}
	}
	if _, err := ParseConfig([]byte("sampling: {temprature: 0.5}\n"), "t"); err == nil || !strings.Contains(err.Error(), "temprature") {
		t.Errorf("an unknown sampling key: err %v, want one naming it", err)
	}
}
