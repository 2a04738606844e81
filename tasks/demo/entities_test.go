package demo

import (
	"strings"
	"testing"
)

func TestTaskIsDeterministicAndSplit(t *testing.T) {
	a, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(DefaultConfig())
	ea, eb := a.Entities(), b.Entities()
	seen := 0
	values := map[int]bool{}
	for i := range ea {
		if ea[i] != eb[i] {
			t.Fatalf("entity %d differs between two generations with the same seed: %+v vs %+v", i, ea[i], eb[i])
		}
		if ea[i].Value < 100 || ea[i].Value > 999 || values[ea[i].Value] {
			t.Fatalf("entity %+v: value out of range or repeated", ea[i])
		}
		values[ea[i].Value] = true
		if ea[i].Seen {
			seen++
		}
	}
	if len(ea) != 40 || seen != 20 {
		t.Fatalf("got %d entities with %d seen, want 40 and 20", len(ea), seen)
	}
	if n := len(a.AllQuestions(SplitUnseen)); n != 20*9 {
		t.Fatalf("unseen questions: %d, want 180", n)
	}
}

func TestCorpusNeverMentionsUnseen(t *testing.T) {
	task, _ := New(DefaultConfig())
	corpus := task.Corpus(20000, DefaultMix(), 1)
	kinds := map[string]int{}
	for _, ex := range corpus {
		kinds[ex.Kind]++
		for _, e := range task.Entities() {
			if e.Seen {
				continue
			}
			if strings.Contains(ex.Prompt, e.Name) || strings.Contains(ex.Response, e.Name) {
				t.Fatalf("corpus line %q -> %q names unseen entity %s", ex.Prompt, ex.Response, e.Name)
			}
		}
	}
	for _, k := range []string{"seen_direct", "seen_call", "arithmetic", "reason_call", "verify_call", "random_names"} {
		if kinds[k] == 0 {
			t.Fatalf("corpus has no %s lines: %v", k, kinds)
		}
	}
}

func TestScore(t *testing.T) {
	cases := []struct {
		resp string
		ans  int
		want bool
	}{
		{Direct(450, 3), 453, true},
		{Calling("lugr", 450, 3), 453, true},
		{ReasonLine(450, 3), 453, true},
		{VerifyLine(450, 3), 453, true},
		{"450+3=453", 453, false},    // no terminator
		{"450+3=454;", 453, false},   // wrong
		{"=453;=452;", 453, false},   // last '=' counts
		{"<result>453;", 453, false}, // no '='
		{"450+3=4530;", 453, false},
	}
	for _, c := range cases {
		if got, _ := Score(c.resp, c.ans); got != c.want {
			t.Errorf("Score(%q, %d) = %v, want %v", c.resp, c.ans, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.MaxValue = 110
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "distinct") {
		t.Fatalf("want an error about distinct values, got %v", err)
	}
}
