package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newSandbox(t *testing.T, l Limits) *Sandbox {
	t.Helper()
	s, err := New(Config{Limits: l, Parallel: 2})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Logf("python %s, isolation %+v", s.Python(), s.Isolation())
	return s
}

// leftovers lists processes still running a sandbox program.
func leftovers() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), "aipo-sandbox-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func waitNoLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		l := leftovers()
		if len(l) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox processes still running after the program ended: pids %v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunOKAndFailing(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: 5 * time.Second})
	r := s.Run(context.Background(), "print(sum(range(10)))\n")
	if r.Status != StatusOK || strings.TrimSpace(r.Stdout) != "45" {
		t.Fatalf("print program: %+v, want ok with stdout 45", r)
	}
	r = s.Run(context.Background(), "def f(x):\n    return x + 1\nassert f(1) == 3, 'f(1) is wrong'\n")
	if r.Status != StatusFailed || r.ExitCode != 1 || !strings.Contains(r.Summary(), "AssertionError: f(1) is wrong") {
		t.Fatalf("failing assert: status %s exit %d summary %q, want failed, 1, AssertionError", r.Status, r.ExitCode, r.Summary())
	}
	r = s.Run(context.Background(), "def broken(:\n")
	if r.Status != StatusFailed || !strings.Contains(r.Stderr, "SyntaxError") {
		t.Fatalf("syntax error: %+v, want failed with SyntaxError", r)
	}
}

func TestInfiniteLoopKilled(t *testing.T) {
	for _, c := range []struct{ name, prog string }{
		{"busy loop (CPU)", "while True:\n    pass\n"},
		{"sleep (wall clock)", "import time\ntime.sleep(600)\n"},
	} {
		s := newSandbox(t, Limits{Timeout: 1500 * time.Millisecond, CPUTime: time.Second})
		start := time.Now()
		r := s.Run(context.Background(), c.prog)
		if r.Status != StatusTimeout {
			t.Errorf("%s: status %s (%s), want timeout", c.name, r.Status, r.Summary())
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("%s: took %s to stop, want about the 1.5s timeout", c.name, d)
		}
		waitNoLeftovers(t)
	}
}

func TestMemoryBombLimited(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: 10 * time.Second, MemoryBytes: 256 << 20})
	r := s.Run(context.Background(), "x = []\nwhile True:\n    x.append(bytearray(10**7))\n")
	if r.Status != StatusFailed || !strings.Contains(r.Stderr, "MemoryError") {
		t.Fatalf("memory bomb: status %s, summary %q, want failed with MemoryError", r.Status, r.Summary())
	}
	// A program within the limit still runs.
	r = s.Run(context.Background(), "x = bytearray(50 * 2**20)\nprint(len(x))\n")
	if !r.Passed() {
		t.Fatalf("50 MiB allocation under a 256 MiB limit: %s", r.Summary())
	}
}

func TestForkBombLimited(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: 3 * time.Second, Processes: 8})
	// Count how many children the program manages to start; each sleeps.
	prog := `import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)
`
	r := s.Run(context.Background(), prog)
	if !r.Passed() {
		t.Fatalf("counting forks: %s\n%s", r.Summary(), r.Stderr)
	}
	var n int
	fmt.Sscan(r.Stdout, &n)
	if s.Isolation().Notice == "" && (n < 1 || n > 8) {
		t.Errorf("the program started %d children, want between 1 and the limit of 8", n)
	}
	t.Logf("children started: %d (limit 8)", n)
	waitNoLeftovers(t)
	// A classic fork bomb ends (by the process limit or the timeout) and
	// leaves nothing behind.
	r = s.Run(context.Background(), "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
	if r.Passed() {
		t.Errorf("fork bomb passed: %+v", r)
	}
	waitNoLeftovers(t)
}

func TestFileSizeLimit(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: 5 * time.Second, FileBytes: 1 << 20})
	r := s.Run(context.Background(), "with open('big.bin', 'wb') as f:\n    for i in range(10):\n        f.write(b'x' * 2**20)\n")
	if r.Status != StatusFailed || !strings.Contains(r.Stderr, "File too large") {
		t.Fatalf("10 MiB file under a 1 MiB limit: status %s, summary %q, want failed with 'File too large'", r.Status, r.Summary())
	}
	r = s.Run(context.Background(), "with open('ok.bin', 'wb') as f:\n    f.write(b'x' * 1000)\n")
	if !r.Passed() {
		t.Fatalf("small file: %s", r.Summary())
	}
}

func TestWritesOutsideRefused(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: 5 * time.Second})
	outside := filepath.Join(os.TempDir(), fmt.Sprintf("aipo-escape-%d", time.Now().UnixNano()))
	progs := map[string]string{
		"open for writing": fmt.Sprintf("open(%q, 'w').write('x')\n", outside),
		"os.open":          fmt.Sprintf("import os\nos.close(os.open(%q, os.O_CREAT | os.O_WRONLY))\n", outside),
		"parent dir":       "open('../escape.txt', 'w').write('x')\n",
		"mkdir":            fmt.Sprintf("import os\nos.mkdir(%q)\n", outside),
		"rename in":        fmt.Sprintf("open('a', 'w').write('x')\nimport os\nos.rename('a', %q)\n", outside),
	}
	for name, prog := range progs {
		r := s.Run(context.Background(), prog)
		if r.Status != StatusFailed || !strings.Contains(r.Stderr, "PermissionError") {
			t.Errorf("%s: status %s, summary %q, want failed with PermissionError", name, r.Status, r.Summary())
		}
		if _, err := os.Stat(outside); err == nil {
			os.RemoveAll(outside)
			t.Errorf("%s: %s was created outside the sandbox", name, outside)
		}
	}
	// Reading the system is allowed (imports need it).
	if r := s.Run(context.Background(), "print(len(open('/etc/hostname').read()) >= 0)\n"); !r.Passed() {
		t.Errorf("reading /etc/hostname: %s", r.Summary())
	}
}

func TestNetworkRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	prog := fmt.Sprintf("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=3).sendall(b'hi')\n", port)
	// With namespaces (where the machine allows) and without (the audit
	// hook refuses sockets).
	for _, noNS := range []bool{false, true} {
		s, err := New(Config{Limits: Limits{Timeout: 10 * time.Second}, NoNamespaces: noNS})
		if err != nil {
			t.Fatal(err)
		}
		r := s.Run(context.Background(), prog)
		if r.Passed() {
			t.Fatalf("no_namespaces=%v: the program reached 127.0.0.1:%d from the sandbox", noNS, port)
		}
		t.Logf("no_namespaces=%v: connection attempt: %s (isolation %+v)", noNS, r.Summary(), s.Isolation())
		if !noNS && !s.Isolation().NetNamespace {
			t.Logf("no network namespace on this machine (%s); the audit hook refused the socket", s.Isolation().Notice)
		}
	}
	select {
	case <-accepted:
		t.Fatalf("the listener accepted a connection from the sandbox")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestTempDirPrivate(t *testing.T) {
	t.Setenv("AIPO_SANDBOX_TEST_SECRET", "do-not-leak")
	s := newSandbox(t, Limits{Timeout: 5 * time.Second})
	prog := `import os, stat
cwd = os.getcwd()
assert os.environ.get('HOME') == cwd and os.environ.get('TMPDIR') == cwd, (os.environ.get('HOME'), cwd)
assert 'AIPO_SANDBOX_TEST_SECRET' not in os.environ, 'caller environment leaked'
mode = stat.S_IMODE(os.stat(cwd).st_mode)
assert mode == 0o700, oct(mode)
open('scratch.txt', 'w').write('mine')
import tempfile
with tempfile.NamedTemporaryFile(dir=None) as f:
    assert f.name.startswith(cwd), f.name
print(cwd)
`
	var dirs []string
	for range 2 {
		r := s.Run(context.Background(), prog)
		if !r.Passed() {
			t.Fatalf("private dir checks: %s\n%s", r.Summary(), r.Stderr)
		}
		dirs = append(dirs, strings.TrimSpace(r.Stdout))
	}
	if dirs[0] == dirs[1] {
		t.Errorf("two runs shared the working directory %s", dirs[0])
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("working directory %s was not removed", d)
		}
	}
}

func TestContextCancelStopsProgram(t *testing.T) {
	s := newSandbox(t, Limits{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := s.Run(ctx, "import time\ntime.sleep(60)\n")
	if r.Passed() || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled run: %+v after %s, want stopped within seconds", r, time.Since(start))
	}
	waitNoLeftovers(t)
}
