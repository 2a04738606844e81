package testgate

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Skip is one skipped test.
type Skip struct {
	Package string // module-relative ("." for the root)
	Test    string
	Message string // the test's output, file:line prefixes removed
	Rule    *Rule  // the rule that allows it, or nil
}

// Gate consumes a `go test -json` stream line by line (Line) and, at its
// end (Finish), reports and judges it.
type Gate struct {
	out    io.Writer
	allow  *AllowList
	module string

	pkgs       map[string]*pkgState
	order      []string // packages in the order they started
	skips      []Skip
	failed     []string // packages that failed
	unfinished []string // packages whose binary never reported an end
	timed      []Timed  // top-level tests that passed or failed, with their time
}

// Timed is one top-level test's time (subtests are in their parent's).
type Timed struct {
	Package string // module-relative
	Test    string
	Seconds float64
}

// pkgState is what the gate holds of a package until it ends.
type pkgState struct {
	lines []outLine
	tests map[string]string // test -> its end action ("" while running)
	runs  []string          // tests in the order they started
	done  bool
	// bench is the benchmark whose name line came last, and benchLog the
	// indented lines printed since: a benchmark's log. test2json gives a
	// benchmark's lines to the package or to the benchmark before it, and
	// its --- SKIP line comes after them, so a skipped benchmark's message
	// is read from here.
	bench    string
	benchLog []string
	// benchSkips holds a skipped benchmark's log from its --- SKIP line
	// on: test2json sends the skip event itself later, after the next
	// benchmark's name line.
	benchSkips map[string][]string
}

type outLine struct{ test, text string }

// New returns a gate printing to out; allow may be nil (no skip allowed);
// module is the module path the allow list's packages are relative to.
func New(out io.Writer, allow *AllowList, module string) *Gate {
	return &Gate{out: out, allow: allow, module: module, pkgs: map[string]*pkgState{}}
}

// Line handles one line of the stream: an event, or text printed as is.
func (g *Gate) Line(line []byte) {
	e, ok := parseEvent(line)
	if !ok {
		s := string(line)
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		fmt.Fprint(g.out, s)
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(g.out, e.Output)
		return
	case "build-fail":
		return
	}
	p := g.pkg(e.Package)
	switch {
	case e.Action == "output":
		p.followBench(e.Output)
		if _, seen := p.tests[e.Test]; e.Test != "" && !seen {
			p.runs = append(p.runs, e.Test)
			p.tests[e.Test] = ""
		}
		p.lines = append(p.lines, outLine{e.Test, e.Output})
	case e.Test != "" && e.Action == "run":
		if _, seen := p.tests[e.Test]; !seen {
			p.runs = append(p.runs, e.Test)
		}
		p.tests[e.Test] = ""
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		p.tests[e.Test] = e.Action
		if e.Action == "skip" {
			g.recordSkip(e.Package, e.Test, p)
		} else if !strings.Contains(e.Test, "/") {
			g.timed = append(g.timed, Timed{Package: g.rel(e.Package), Test: e.Test, Seconds: e.Elapsed})
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		g.endPackage(e, p)
	}
}

func (g *Gate) pkg(name string) *pkgState {
	p := g.pkgs[name]
	if p == nil {
		p = &pkgState{tests: map[string]string{}}
		g.pkgs[name] = p
		g.order = append(g.order, name)
	}
	return p
}

// benchName is the line a verbose benchmark run prints as a benchmark
// starts: its name alone (its result line has the figures after a tab).
var benchName = regexp.MustCompile(`^(Benchmark\S*)\n$`)

// followBench keeps the log of the benchmark running (pkgState.bench).
func (p *pkgState) followBench(text string) {
	if m := benchName.FindStringSubmatch(text); m != nil {
		p.bench, p.benchLog = m[1], nil
		return
	}
	if name, ok := strings.CutPrefix(strings.TrimSpace(text), "--- SKIP: "); ok && name == p.bench {
		if p.benchSkips == nil {
			p.benchSkips = map[string][]string{}
		}
		p.benchSkips[name] = p.benchLog
		p.bench, p.benchLog = "", nil
		return
	}
	if p.bench != "" && (strings.HasPrefix(text, "    ") || strings.HasPrefix(text, "\t")) {
		p.benchLog = append(p.benchLog, text)
	}
}

// fileLine is the file:line prefix testing puts before a logged line.
var fileLine = regexp.MustCompile(`^\s*[\w.\-]+\.go:\d+: `)

func (g *Gate) recordSkip(pkg, test string, p *pkgState) {
	var msg []string
	lines := p.lines
	if log, ok := p.benchSkips[test]; ok {
		lines = nil
		for _, text := range log {
			lines = append(lines, outLine{test, text})
		}
	}
	for _, l := range lines {
		if l.test != test || framing(l.text) || strings.HasPrefix(strings.TrimSpace(l.text), "--- SKIP: ") {
			continue
		}
		if s := strings.TrimSpace(fileLine.ReplaceAllString(l.text, "")); s != "" {
			msg = append(msg, s)
		}
	}
	rel := g.rel(pkg)
	message := strings.Join(msg, "\n")
	g.skips = append(g.skips, Skip{Package: rel, Test: test, Message: message, Rule: g.allow.Match(rel, test, message)})
}

// rel is pkg relative to the module ("." for the module itself).
func (g *Gate) rel(pkg string) string {
	if g.module == "" {
		return pkg
	}
	if pkg == g.module {
		return "."
	}
	if r, ok := strings.CutPrefix(pkg, g.module+"/"); ok {
		return r
	}
	return pkg
}

// endPackage prints a package's result as plain go test does: the ok (or
// "no test files") line of a passing package; the output of its failed and
// unfinished tests and its own lines (panics, the FAIL line) for a failing
// one.
func (g *Gate) endPackage(e Event, p *pkgState) {
	p.done = true
	if e.Action != "fail" {
		printed := false
		for _, l := range p.lines {
			if l.test == "" && (strings.HasPrefix(l.text, "ok  ") || strings.HasPrefix(l.text, "?   ")) {
				fmt.Fprint(g.out, l.text)
				printed = true
			}
		}
		if !printed && e.Action == "pass" {
			fmt.Fprintf(g.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		p.lines = nil
		return
	}
	g.failed = append(g.failed, e.Package)
	g.printFailure(p)
	p.lines = nil
}

// printFailure prints, test by test in the order they started, the output
// of each failed or unfinished test (its --- FAIL line first, as plain go
// test prints it), then the package's own lines.
func (g *Gate) printFailure(p *pkgState) {
	for _, t := range p.runs {
		if end := p.tests[t]; end != "fail" && end != "" {
			continue
		}
		var head, body []string
		for _, l := range p.lines {
			if l.test != t || framing(l.text) {
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(l.text), "--- FAIL: ") {
				head = append(head, l.text)
			} else {
				body = append(body, l.text)
			}
		}
		// A subtest's lines are indented by its depth, as plain go test does.
		indent := strings.Repeat("    ", strings.Count(t, "/"))
		for _, l := range append(head, body...) {
			fmt.Fprint(g.out, indent+l)
		}
	}
	for _, l := range p.lines {
		if l.test == "" && !framing(l.text) {
			fmt.Fprint(g.out, l.text)
		}
	}
}
