package evalconfig

import (
	"strings"
	"testing"
)

// TestConfigErrors names what is wrong with a config, fills the paper's
// defaults and resolves a preset, refusing an unknown verifier or template.
func TestConfigErrors(t *testing.T) {
	cases := map[string]string{
		"out is empty":             "policy: {uri: x://y}\nbenchmarks: [{preset: aime24}]\n",
		"policy.uri is empty":      "out: o\nbenchmarks: [{preset: aime24}]\n",
		"no benchmarks":            "out: o\npolicy: {uri: x://y}\n",
		"preset \"aime2\" unknown": "out: o\npolicy: {uri: x://y}\nbenchmarks: [{preset: aime2}]\n",
		"listed twice":             "out: o\npolicy: {uri: x://y}\nbenchmarks: [{preset: aime24}, {preset: aime24}]\n",
		"top_p":                    "out: o\npolicy: {uri: x://y}\nsampling: {top_p: 2}\nbenchmarks: [{preset: aime24}]\n",
	}
	for want, y := range cases {
		c, err := Parse([]byte(y), "t")
		if err == nil {
			err = c.WithDefaults().Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want one mentioning %q", y, err, want)
		}
	}
	if _, err := Parse([]byte("out: o\nbogus: 1\n"), "t"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown key: %v", err)
	}
	// Defaults are the paper's.
	c, _ := Parse([]byte("out: o\npolicy: {uri: x://y}\nbenchmarks: [{preset: aime24}]\n"), "t")
	c = c.WithDefaults()
	if c.Sampling.Temperature != 1 || c.Sampling.TopP != 1 || c.Sampling.MaxTokens != 16384 {
		t.Errorf("defaults: %+v", c.Sampling)
	}
	r, err := Config{DataDir: "/data"}.WithDefaults().Resolve(Benchmark{Preset: "aime24"})
	if err != nil || r.Samples != 16 || r.Source.Path != "/data/math/aime24/test.jsonl" {
		t.Errorf("aime24 preset: samples %d path %s err %v; want 16 (Avg@16) and the bundled path", r.Samples, r.Source.Path, err)
	}
	if _, err := c.Resolve(Benchmark{Name: "x", Path: "f.jsonl", Verifier: "nope"}); err == nil || !strings.Contains(err.Error(), "no verifier") {
		t.Errorf("unknown verifier: %v", err)
	}
	if _, err := c.Resolve(Benchmark{Name: "x", Path: "f.jsonl", Template: "mathh"}); err == nil || !strings.Contains(err.Error(), "neither a built-in template") {
		t.Errorf("unknown template: %v", err)
	}
}
