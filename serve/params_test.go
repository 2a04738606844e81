package serve

import (
	"encoding/json"
	"strings"
	"testing"
)

// OpenAI parameters the sampler does not implement are refused with a 400
// naming them, not silently ignored; their neutral values are accepted; and
// max_tokens beyond the context is refused.
func TestUnsupportedParametersRefused(t *testing.T) {
	r := start(t, Options{})
	base := "http://" + r.httpAddr
	refused := map[string]any{
		"logit_bias":         map[string]int{"5": 100},
		"presence_penalty":   0.5,
		"frequency_penalty":  -1,
		"repetition_penalty": 1.2,
		"tools":              []any{map[string]any{"type": "function", "function": map[string]string{"name": "f"}}},
		"tool_choice":        "auto",
		"response_format":    map[string]string{"type": "json_object"},
	}
	for name, v := range refused {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			body := map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 2, name: v}
			if strings.Contains(path, "chat") {
				body = map[string]any{"model": "tiny", "messages": []any{map[string]string{"role": "user", "content": "hi"}}, "max_tokens": 2, name: v}
			}
			status, _, out := post(t, base+path, body)
			var e errorBody
			_ = json.Unmarshal(out, &e)
			if status != 400 || e.Error.Param == nil || *e.Error.Param != name || !strings.Contains(e.Error.Message, name+" is not supported") {
				t.Errorf("%s with %s: status %d, body %s; want 400 naming %s", path, name, status, out, name)
			}
		}
	}
	neutral := map[string]any{"logit_bias": map[string]int{}, "presence_penalty": 0, "frequency_penalty": 0.0,
		"repetition_penalty": 1, "tools": []any{}, "tool_choice": "none", "response_format": map[string]string{"type": "text"}}
	body := map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 2}
	for k, v := range neutral {
		body[k] = v
	}
	if status, _, out := post(t, base+"/v1/completions", body); status != 200 {
		t.Errorf("neutral values of the unsupported parameters: status %d, body %s; want 200", status, out)
	}
	status, _, out := post(t, base+"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 1000000})
	if status != 400 || !strings.Contains(string(out), "max_tokens 1000000 is more than this model's context") {
		t.Errorf("max_tokens 1000000: status %d, body %s; want 400 naming the context", status, out)
	}
}
