package evalconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSamplingKeys reads every key of the sampling section, keeps the
// default temperature when the key is left out and greedy decoding when it
// says 0, round-trips through JSON, and names an unknown key.
func TestSamplingKeys(t *testing.T) {
	c, err := Parse([]byte("sampling: {samples: 3, temperature: 0, top_p: 0.5, top_k: 7, max_tokens: 9, seed: 11, stop: [x]}\n"), "t")
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
		c, err := Parse([]byte(y), "t")
		if err != nil || c.Sampling.Temperature != DefaultTemperature {
			t.Errorf("%q: temperature %v, err %v; want the default %v", y, c.Sampling.Temperature, err, DefaultTemperature)
		}
	}
	if _, err := Parse([]byte("sampling: {temprature: 0.5}\n"), "t"); err == nil || !strings.Contains(err.Error(), "temprature") {
		t.Errorf("an unknown sampling key: err %v, want one naming it", err)
	}
}
