package evalconfig

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/yamlset"
)

// --set reaches the keys of sampling, which decodes itself, and the
// benchmarks list as the file's keys would; an unknown key of sampling is
// refused with the key meant.
func TestParseConfigWithSets(t *testing.T) {
	const file = "out: o\npolicy: {uri: 'grpc://a:1'}\nsampling: {samples: 2}\nbenchmarks: [{preset: gsm8k}]\n"
	var l yamlset.List
	for _, a := range []string{"sampling.temperature=0.6", "sampling.stop=['</s>']", "benchmarks.1={preset: math500, limit: 3}"} {
		if err := l.Set(a); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Parse([]byte(file), "e.yaml", l...)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sampling
	if s.Temperature != 0.6 || s.Samples != 2 || len(s.StopStrings) != 1 || len(c.Benchmarks) != 2 || c.Benchmarks[1].Limit != 3 {
		t.Errorf("sampling %+v, benchmarks %+v", s, c.Benchmarks)
	}
	for _, tc := range []struct{ arg, want string }{
		{"sampling.temprature=0.6", "sampling.temprature is not a key of the configuration; did you mean sampling.temperature?"},
		{"sampling.samples=all", `sampling.samples takes an integer, not "all"`},
		{"benchmark.0.limit=1", "did you mean benchmarks.0.limit"},
	} {
		var l yamlset.List
		if err := l.Set(tc.arg); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse([]byte(file), "e.yaml", l...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want it to say %q", tc.arg, err, tc.want)
		}
	}
}
