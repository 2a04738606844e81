package testgate

import (
	"fmt"
	"sort"
	"strings"
)

// Result is the gate's judgement of a whole stream.
type Result struct {
	Failed     []string // packages that failed
	Unfinished []string // packages whose test binary never reported an end
	Skips      []Skip
	Disallowed int // skips no rule allows
}

// OK reports whether the run passes the gate: no package failed or was
// left unfinished, and every skip is allowed.
func (r Result) OK() bool {
	return len(r.Failed) == 0 && len(r.Unfinished) == 0 && r.Disallowed == 0
}

// Finish ends the stream: it prints the packages that never ended (a test
// binary killed, or go test itself), then the skips (allowed ones grouped
// by the rule with its reason, then the others one by one), and returns
// the judgement. allowFile names the allow list in the advice printed.
func (g *Gate) Finish(allowFile string) Result {
	for _, name := range g.order {
		p := g.pkgs[name]
		if p.done {
			continue
		}
		g.unfinished = append(g.unfinished, name)
		g.printFailure(p)
		fmt.Fprintf(g.out, "FAIL\t%s\t(the stream ended before the package did: its test binary or go test was killed)\n", name)
	}
	r := Result{Failed: g.failed, Unfinished: g.unfinished, Skips: g.skips}
	for _, s := range g.skips {
		if s.Rule == nil {
			r.Disallowed++
		}
	}
	g.printSlowest(slowestShown)
	g.printSkips(r, allowFile)
	return r
}

// slowestShown is how many of the slowest tests Finish lists.
const slowestShown = 15

// Slowest returns the n top-level tests that took longest, longest first
// (ties by package and name).
func (g *Gate) Slowest(n int) []Timed {
	t := append([]Timed(nil), g.timed...)
	sort.Slice(t, func(i, j int) bool {
		if t[i].Seconds != t[j].Seconds {
			return t[i].Seconds > t[j].Seconds
		}
		if t[i].Package != t[j].Package {
			return t[i].Package < t[j].Package
		}
		return t[i].Test < t[j].Test
	})
	return t[:min(n, len(t))]
}

// printSlowest lists the n slowest tests of a second or more with their
// seconds and their share of all tests' time, so that a run's log says
// where its time went (packages run side by side: the tests' seconds add
// up to more than the wall time).
func (g *Gate) printSlowest(n int) {
	total := 0.0
	for _, t := range g.timed {
		total += t.Seconds
	}
	header := false
	for _, t := range g.Slowest(n) {
		if t.Seconds < 1 {
			break
		}
		if !header {
			fmt.Fprintf(g.out, "\nslowest tests (of %d, %.0f s in all, packages side by side):\n", len(g.timed), total)
			header = true
		}
		fmt.Fprintf(g.out, "  %7.1f s %5.1f%%  %s %s\n", t.Seconds, 100*t.Seconds/total, t.Package, t.Test)
	}
}

func (g *Gate) printSkips(r Result, allowFile string) {
	if len(r.Skips) == 0 {
		return
	}
	fmt.Fprintf(g.out, "\nskipped tests: %d (%d allowed by %s, %d not allowed)\n",
		len(r.Skips), len(r.Skips)-r.Disallowed, allowFile, r.Disallowed)
	// Allowed skips: one paragraph per rule and package.
	type group struct {
		rule  *Rule
		pkg   string
		tests []string
		msgs  map[string]bool
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, s := range r.Skips {
		if s.Rule == nil {
			continue
		}
		key := s.Rule.Where + "\x00" + s.Package
		gr := byKey[key]
		if gr == nil {
			gr = &group{rule: s.Rule, pkg: s.Package, msgs: map[string]bool{}}
			byKey[key] = gr
			groups = append(groups, gr)
		}
		gr.tests = append(gr.tests, s.Test)
		gr.msgs[firstLine(s.Message)] = true
	}
	for _, gr := range groups {
		msgs := make([]string, 0, len(gr.msgs))
		for m := range gr.msgs {
			msgs = append(msgs, m)
		}
		sort.Strings(msgs)
		fmt.Fprintf(g.out, "  allowed: %s (%d): %s\n", gr.pkg, len(gr.tests), wrap(gr.tests, 96, "      "))
		fmt.Fprintf(g.out, "    skipped with: %s\n", strings.Join(msgs, "; "))
		fmt.Fprintf(g.out, "    allowed because: %s (%s)\n", gr.rule.Reason, gr.rule.Where)
	}
	for _, s := range r.Skips {
		if s.Rule != nil {
			continue
		}
		fmt.Fprintf(g.out, "  NOT ALLOWED: %s: %s\n", s.Package, s.Test)
		msg := s.Message
		if msg == "" {
			msg = "(the test logged no reason)"
		}
		for _, l := range strings.Split(msg, "\n") {
			fmt.Fprintf(g.out, "    %s\n", l)
		}
	}
	if r.Disallowed > 0 {
		fmt.Fprintf(g.out, "FAIL: %d skipped tests are not allowed: make them run (each message above says what is missing), or, for a skip that is legitimate on a machine make test runs on, add a line to %s: %s\n",
			r.Disallowed, allowFile, AllowListFormat)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if l == "" {
		return "(no reason logged)"
	}
	return l
}

// wrap joins words with spaces, breaking lines before width characters;
// each further line starts with indent.
func wrap(words []string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range words {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = len(indent)
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
