package runconfig

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestEvalSamplingAsBefore pins the sampling of the benchmark evaluations
// of every shipped run configuration to what it was while eval.Sampling
// copied the sampling fields (the JSON eval reports and fingerprints
// hold, written by that build).
func TestEvalSamplingAsBefore(t *testing.T) {
	for name, want := range map[string]string{
		"demo.yaml":       `{"samples":8,"temperature":1,"top_p":1,"top_k":0,"max_tokens":24,"seed":0,"stop":[";"]}`,
		"quick.yaml":      `{"samples":2,"temperature":1,"top_p":1,"top_k":0,"max_tokens":24,"seed":0,"stop":[";"]}`,
		"math.yaml":       `{"samples":4,"temperature":1,"top_p":1,"top_k":0,"max_tokens":16384,"seed":0,"stop":null}`,
		"math-local.yaml": `{"samples":4,"temperature":1,"top_p":1,"top_k":0,"max_tokens":2048,"seed":0,"stop":null}`,
	} {
		c, err := Load(context.Background(), filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(c.EvalSampling())
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s: evaluation sampling %s, want %s", name, got, want)
		}
	}
	c := parseText(t, "run: {dir: /tmp/r}\ndata: {demo: true}\neval: {temperature: 0}\npolicy: {top_p: 0.9, top_k: 20}\n")
	if s := c.EvalSampling(); s.Temperature != 0 || s.TopP != 0.9 || s.TopK != 20 {
		t.Errorf("eval.temperature 0 under policy top_p 0.9, top_k 20: evaluation sampling %+v, want greedy with the policy's top_p and top_k", s)
	}
}
