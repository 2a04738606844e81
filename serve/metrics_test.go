package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// GET /metrics is Prometheus' text format and counts what was served;
// GET /v1/models/{id} describes the served model and 404s another id.
func TestMetricsAndModelByID(t *testing.T) {
	r := start(t, Options{})
	base := "http://" + r.httpAddr
	for range 3 {
		if status, _, out := post(t, base+"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 4, "temperature": 0}); status != 200 {
			t.Fatalf("completion: %d %s", status, out)
		}
	}
	post(t, base+"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "temperature": -1})
	status, body := get(t, base+"/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, body)
	}
	count := func(code string) float64 {
		for _, m := range families["aipo_serve_requests_total"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] == "/v1/completions" && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	if count("200") != 3 || count("400") != 1 {
		t.Errorf("requests_total: %v ok, %v bad; want 3 and 1\n%s", count("200"), count("400"), body)
	}
	if h := families["aipo_serve_request_duration_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() < 3 {
		t.Errorf("no latency histogram of the completions:\n%s", body)
	}
	if g := families["aipo_serve_generated_tokens_total"]; g == nil || g.GetMetric()[0].GetCounter().GetValue() < 3 {
		t.Errorf("generated tokens not counted:\n%s", body)
	}
	for _, name := range []string{"aipo_serve_queue_depth", "aipo_serve_active_sequences", "aipo_serve_policy_version"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if v := families["aipo_serve_policy_version"].GetMetric()[0].GetGauge().GetValue(); v != 3 {
		t.Errorf("policy_version %v, want 3 (the test checkpoint's)", v)
	}

	status, body = get(t, base+"/v1/models/tiny")
	var card map[string]any
	if status != 200 || json.Unmarshal(body, &card) != nil || card["id"] != "tiny" {
		t.Errorf("GET /v1/models/tiny: %d %s", status, body)
	}
	if status, body = get(t, base+"/v1/models/gpt-9"); status != 404 || !strings.Contains(string(body), "model_not_found") {
		t.Errorf("GET /v1/models/gpt-9: %d %s, want 404 model_not_found", status, body)
	}
}
