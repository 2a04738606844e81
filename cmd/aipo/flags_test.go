package main

import (
	"strings"
	"testing"
)

// Every command exits 0 for --help, and an unknown flag exits 2 with the
// flag meant.
func TestHelpAndUnknownFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per command")
	}
	for _, c := range [][]string{{"train"}, {"learn"}, {"rollout"}, {"eval"}, {"analyze"}, {"serve"}, {"demo"}, {"tokenize"}, {"plan"}, {"collaborators", "serve"}} {
		if code, out := runAipo(t, append(c, "--help")...); code != 0 || !strings.Contains(out, "Usage") {
			t.Errorf("aipo %s --help exited %d (want 0) with:\n%s", strings.Join(c, " "), code, out)
		}
	}
	// The command's own flags come first, Beam's under their own heading.
	_, out := runAipo(t, "analyze", "--help")
	own, beam, runner := strings.Index(out, "  -run string"), strings.Index(out, "Beam's flags"), strings.Index(out, "  -runner")
	if own < 0 || beam < own || runner < beam {
		t.Errorf("aipo analyze --help: own flag at %d, Beam's heading at %d, --runner at %d; want them in that order:\n%s", own, beam, runner, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--confg", "x.yaml"}, "did you mean --config?"},
		{[]string{"serve", "--checkpont", "x"}, "did you mean --checkpoint?"},
		{[]string{"demo", "--takeover"}, "did you mean --take-over?"},
	} {
		code, out := runAipo(t, c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("aipo %s exited %d, want 2 saying %q; output:\n%s", strings.Join(c.args, " "), code, c.want, out)
		}
	}
}
