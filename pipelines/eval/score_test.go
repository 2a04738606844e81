package eval

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/sandbox"
)

// TestHostileResponsesScoredWrong feeds code responses that misbehave to
// the MBPP scorer: each is stopped and scored wrong without an error, so
// the pipeline goes on; a correct response still passes afterwards.
func TestHostileResponsesScoredWrong(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Limits: sandbox.Limits{Timeout: 3 * time.Second, CPUTime: 2 * time.Second, MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := newScorer(evalconfig.VerifierMBPP, sb)
	if err != nil {
		t.Fatal(err)
	}
	p := schemas.Prompt{ID: "mbpp/x", Problem: "Write add(a, b).", Answer: "def add(a, b):\n    return a + b",
		Extra: `{"test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]}`}
	wrap := func(body string) string { return "Here you go:\n```python\n" + body + "\n```\n" }
	hostile := map[string]string{
		"loop forever":  "def add(a, b):\n    while True:\n        pass",
		"socket":        "import socket\nsocket.create_connection(('93.184.216.34', 80), timeout=2)\ndef add(a, b):\n    return a + b",
		"fork bomb":     "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
		"memory bomb":   "x = []\nwhile True:\n    x.append(bytearray(10**7))",
		"write outside": "open('/tmp/aipo-eval-escape', 'w').write('x')\ndef add(a, b):\n    return a + b",
		"wrong answer":  "def add(a, b):\n    return a - b",
		"exit early":    "import sys\nsys.exit(3)",
	}
	for name, code := range hostile {
		v, err := sc.score(context.Background(), p, wrap(code))
		if err != nil {
			t.Errorf("%s: scoring failed instead of scoring wrong: %v", name, err)
			continue
		}
		if v.Correct || v.Score != 0 {
			t.Errorf("%s: scored correct (%s)", name, v.Reason)
		}
		t.Logf("%-13s -> %s", name, v.Reason)
	}
	v, err := sc.score(context.Background(), p, wrap(p.Answer))
	if err != nil || !v.Correct {
		t.Fatalf("the correct solution after the hostile ones: %+v, %v", v, err)
	}
	if v, _ := sc.score(context.Background(), p, "I cannot solve this."); v.Correct || !strings.Contains(v.Reason, "SyntaxError") {
		t.Errorf("a response without code: %+v", v)
	}
}

func TestExtractCode(t *testing.T) {
	cases := []struct{ in, want string }{
		{"text\n```python\ndef f():\n    return 1\n```\nmore", "def f():\n    return 1"},
		{"```\nx = 1\n```\n```python\ny = 2\n```", "y = 2"},
		{"```py\na = 1\n```\n```\nprint(a)\n```", "a = 1"},
		{"```python\ndef f():\n    return 1", "def f():\n    return 1"},
		{"    return x + 1\n", "    return x + 1"},
	}
	for _, c := range cases {
		if got := sandbox.ExtractCode(c.in); got != c.want {
			t.Errorf("ExtractCode(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
