package testgate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpuRule allows example.com/rec/skip's TestNoGPU, by its message.
const gpuRule = "skip | TestNoGPU | ^no GPU: | the test needs a GPU\n"

// Each recorded stream through the gate: the verdict, what is printed and
// what is not (a passing test's output, the verbose framing).
// wrap breaks a list of test names into lines.
func TestWrap(t *testing.T) {
	got := wrap([]string{"TestAa", "TestBb", "TestCc", "TestDd"}, 16, "  ")
	if want := "TestAa TestBb\n  TestCc TestDd"; got != want {
		t.Errorf("wrap = %q, want %q", got, want)
	}
}

func TestRecordedStreams(t *testing.T) {
	for _, tc := range []struct {
		stream     string
		allow      string
		ok         bool
		failed     int
		unfinished int
		skips      int
		disallowed int
		want       []string
		wantNot    []string
	}{
		{stream: "pass", ok: true,
			want:    []string{"ok  \texample.com/rec/pass\t0.004s\n"},
			wantNot: []string{"a log line of a passing test", "=== RUN", "--- PASS", "skipped tests"}},
		{stream: "fail", failed: 1,
			want: []string{
				"--- FAIL: TestBad (0.00s)\n    f_test.go:7: context before the failure\n    f_test.go:8: want 2, got 3\n",
				"--- FAIL: TestParent (0.00s)\n    --- FAIL: TestParent/broken (0.00s)\n        f_test.go:12: sub failed\n",
				"FAIL\texample.com/rec/fail\t0.007s\n"},
			wantNot: []string{"not shown", "TestGood", "TestParent/ok", "=== RUN"}},
		{stream: "skip", allow: gpuRule, skips: 3, disallowed: 2,
			want: []string{
				"ok  \texample.com/rec/skip\t0.003s\n",
				"skipped tests: 3 (1 allowed by allow.txt, 2 not allowed)",
				"  allowed: skip (1): TestNoGPU\n    skipped with: no GPU: libcuda.so.1 not found\n    allowed because: the test needs a GPU (allow.txt:1)\n",
				"  NOT ALLOWED: skip: TestNoData\n    shared data file math/x.jsonl is absent\n",
				"  NOT ALLOWED: skip: TestRuns/sub\n    sub skipped\n",
				"FAIL: 2 skipped tests are not allowed"}},
		{stream: "skip", allow: gpuRule + "skip | TestNoData|TestRuns/.* | . | the data is elsewhere\n", ok: true, skips: 3,
			want:    []string{"(3 allowed by allow.txt, 0 not allowed)", "  allowed: skip (2): TestNoData TestRuns/sub\n    skipped with: shared data file math/x.jsonl is absent; sub skipped\n"},
			wantNot: []string{"NOT ALLOWED", "FAIL"}},
		// The rule's message does not match: the same test is not allowed.
		{stream: "skip", allow: "skip | TestNoGPU | ^a driver is present | covers machines with a GPU\n", skips: 3, disallowed: 3,
			want: []string{"  NOT ALLOWED: skip: TestNoGPU\n    no GPU: libcuda.so.1 not found\n"}},
		// Without an allow list every skip fails the run.
		{stream: "skip", skips: 3, disallowed: 3, want: []string{"(0 allowed by allow.txt, 3 not allowed)"}},
		{stream: "panic", failed: 1,
			want:    []string{"--- FAIL: TestBoom (0.00s)\npanic: assignment to entry in nil map", "p_test.go:8", "FAIL\texample.com/rec/panicky\t0.005s\n"},
			wantNot: []string{"TestFirst"}},
		{stream: "timeout", failed: 1,
			want: []string{"panic: test timed out after 2s\n\trunning tests:\n\t\tTestHangs (2s)\n", "FAIL\texample.com/rec/timeout\t2.008s\n"}},
		{stream: "broken", failed: 1,
			want: []string{"# example.com/rec/broken [example.com/rec/broken.test]\nbroken/b.go:3:23: cannot use", "FAIL\texample.com/rec/broken [build failed]\n"}},
		{stream: "notests", ok: true, want: []string{"?   \texample.com/rec/notests\t[no test files]\n"}, wantNot: []string{"skipped tests"}},
		{stream: "multi", allow: gpuRule, skips: 3, disallowed: 2,
			want: []string{"ok  \texample.com/rec/pass\t(cached)\nok  \texample.com/rec/skip\t(cached)\n?   \texample.com/rec/notests\t[no test files]\n"}},
		{stream: "killed", unfinished: 1,
			want: []string{"panic: test timed out", "FAIL\texample.com/rec/timeout\t(the stream ended before the package did"}},
		// Benchmarks (-bench with -v): each skip's message is the log its
		// benchmark printed, though test2json gives those lines to the
		// package or to the benchmark before it.
		{stream: "benchskip", allow: "bench | BenchmarkB | ^why\\nskipped because$ | a rule matching the whole message\n", skips: 2, disallowed: 1,
			want:    []string{"  allowed: bench (1): BenchmarkB\n    skipped with: why\n", "  NOT ALLOWED: bench: BenchmarkC/sub\n    sub skip\n"},
			wantNot: []string{"NOT ALLOWED: bench: BenchmarkB"}},
		{stream: "text", ok: true, want: []string{"go: warning: \"./nothing/...\" matched no packages\nok  \texample.com/rec/pass"}},
	} {
		t.Run(tc.stream, func(t *testing.T) {
			var allow *AllowList
			if tc.allow != "" {
				var err error
				if allow, err = ParseAllowList(strings.NewReader(tc.allow), "allow.txt"); err != nil {
					t.Fatal(err)
				}
			}
			f, err := os.Open(filepath.Join("testdata", tc.stream+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			g := New(&out, allow, "example.com/rec")
			if err := g.Consume(f); err != nil {
				t.Fatal(err)
			}
			r := g.Finish("allow.txt")
			got := out.String()
			if r.OK() != tc.ok || len(r.Failed) != tc.failed || len(r.Unfinished) != tc.unfinished || len(r.Skips) != tc.skips || r.Disallowed != tc.disallowed {
				t.Errorf("ok %v, failed %v, unfinished %v, %d skips, %d disallowed; want ok %v, %d failed, %d unfinished, %d skips, %d disallowed\noutput:\n%s",
					r.OK(), r.Failed, r.Unfinished, len(r.Skips), r.Disallowed, tc.ok, tc.failed, tc.unfinished, tc.skips, tc.disallowed, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q\noutput:\n%s", w, got)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("output has %q\noutput:\n%s", w, got)
				}
			}
		})
	}
}

// The slowest top-level tests are listed longest first, subtests, skips
// and tests under a second left out, with their share of all the tests'
// time.
func TestSlowest(t *testing.T) {
	stream := `{"Action":"run","Package":"example.com/rec/a","Test":"TestQuick"}
{"Action":"pass","Package":"example.com/rec/a","Test":"TestQuick","Elapsed":0.5}
{"Action":"run","Package":"example.com/rec/a","Test":"TestSlow"}
{"Action":"pass","Package":"example.com/rec/a","Test":"TestSlow/part","Elapsed":29}
{"Action":"pass","Package":"example.com/rec/a","Test":"TestSlow","Elapsed":30}
{"Action":"fail","Package":"example.com/rec/a","Test":"TestBroken","Elapsed":9.5}
{"Action":"skip","Package":"example.com/rec/a","Test":"TestSkipped","Elapsed":100}
{"Action":"fail","Package":"example.com/rec/a","Elapsed":40}
`
	var out bytes.Buffer
	g := New(&out, nil, "example.com/rec")
	if err := g.Consume(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	got := g.Slowest(2)
	want := []Timed{{"a", "TestSlow", 30}, {"a", "TestBroken", 9.5}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Slowest(2) = %v, want %v", got, want)
	}
	g.Finish("allow.txt")
	if s := out.String(); !strings.Contains(s, "slowest tests (of 3, 40 s in all, packages side by side):\n     30.0 s  75.0%  a TestSlow\n      9.5 s  23.8%  a TestBroken\n\n") {
		t.Errorf("the slowest tests are not listed as expected:\n%s", s)
	}
}
