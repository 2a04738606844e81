package sandbox

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

//go:embed bootstrap.py
var bootstrap string

// Limits bound one program; zero fields take the defaults named.
type Limits struct {
	// Timeout is the wall-clock limit (30s). It is looser than CPUTime
	// because on a loaded machine a program waits for a core.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// CPUTime is the RLIMIT_CPU limit, rounded up to whole seconds (10s,
	// or Timeout when that is shorter).
	CPUTime time.Duration `yaml:"cpu_time" json:"cpu_time"`
	// MemoryBytes is the address-space limit, RLIMIT_AS (1 GiB).
	MemoryBytes int64 `yaml:"memory_bytes" json:"memory_bytes"`
	// FileBytes bounds the size of any file the program writes,
	// RLIMIT_FSIZE (16 MiB).
	FileBytes int64 `yaml:"file_bytes" json:"file_bytes"`
	// Processes is how many processes the program may create besides
	// itself (16).
	Processes int `yaml:"processes" json:"processes"`
	// OpenFiles is RLIMIT_NOFILE (256).
	OpenFiles int `yaml:"open_files" json:"open_files"`
	// OutputBytes is how much of stdout and of stderr is kept (64 KiB each).
	OutputBytes int `yaml:"output_bytes" json:"output_bytes"`
}

func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = 30 * time.Second
	}
	if l.CPUTime <= 0 {
		l.CPUTime = min(l.Timeout, 10*time.Second)
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 1 << 30
	}
	if l.FileBytes <= 0 {
		l.FileBytes = 16 << 20
	}
	if l.Processes <= 0 {
		l.Processes = 16
	}
	if l.OpenFiles <= 0 {
		l.OpenFiles = 256
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = 64 << 10
	}
	return l
}

// Config configures a Sandbox.
type Config struct {
	// Python is the interpreter. Empty: $AIPO_PYTHON, then /usr/bin/python3,
	// then python3 on PATH.
	Python string `yaml:"python" json:"python"`
	Limits Limits `yaml:"limits" json:"limits"`
	// Parallel bounds the programs running at once (GOMAXPROCS).
	Parallel int `yaml:"parallel" json:"parallel"`
	// TempRoot is where working directories are created (os.TempDir()).
	TempRoot string `yaml:"temp_root" json:"temp_root"`
	// NoNamespaces turns off namespaces and the uid switch (the audit hook
	// then refuses sockets).
	NoNamespaces bool `yaml:"no_namespaces" json:"no_namespaces"`
	// SitePackages lets programs import third-party packages (python's
	// site module). Off by default: benchmark programs need only the
	// standard library, and skipping site saves a third of the start-up.
	SitePackages bool `yaml:"site_packages" json:"site_packages"`
	// UIDBase is the first uid of the pool used when running as root
	// (1900000000); slot i runs as UIDBase+i.
	UIDBase int `yaml:"uid_base" json:"uid_base"`
}

// Isolation says which confinements a Sandbox got on this machine.
type Isolation struct {
	NetNamespace bool `json:"net_namespace"`
	PIDNamespace bool `json:"pid_namespace"`
	// UserNamespace is set when a user namespace maps the caller's uid.
	UserNamespace bool `json:"user_namespace"`
	// UIDSwitch is set when programs run under pool uids (as root).
	UIDSwitch bool `json:"uid_switch"`
	// Notice explains a fallback, when there was one.
	Notice string `json:"notice,omitempty"`
}

// Status is how a program ended.
type Status string

// Statuses of a Result.
const (
	StatusOK      Status = "ok"      // exit code 0
	StatusFailed  Status = "failed"  // non-zero exit or killed by a signal other than the limits'
	StatusTimeout Status = "timeout" // wall clock or CPU time ran out
	StatusError   Status = "error"   // the sandbox could not run the program
)

// Result is how one program ended.
type Result struct {
	Status   Status        `json:"status"`
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"`
	Stdout   string        `json:"stdout,omitempty"`
	Stderr   string        `json:"stderr,omitempty"`
	Duration time.Duration `json:"duration"`
	// Err is the sandbox's own failure, for StatusError.
	Err string `json:"err,omitempty"`
}

// Passed reports a clean exit.
func (r Result) Passed() bool { return r.Status == StatusOK }

// Summary is a one-line account of the result: the status and the last
// line of stderr (typically the exception).
func (r Result) Summary() string {
	switch r.Status {
	case StatusOK:
		return "passed"
	case StatusTimeout:
		return fmt.Sprintf("timeout after %s", r.Duration.Round(time.Millisecond))
	case StatusError:
		return "sandbox error: " + r.Err
	}
	last := lastLine(r.Stderr)
	if r.Signal != "" {
		return fmt.Sprintf("killed by %s %s", r.Signal, last)
	}
	if last == "" {
		return fmt.Sprintf("exit %d", r.ExitCode)
	}
	return last
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// Sandbox runs programs; it is safe for concurrent use.
type Sandbox struct {
	cfg    Config
	iso    Isolation
	python string
	slots  chan int
	root   string
	isRoot bool
}

var noticeOnce sync.Once

// New resolves the interpreter and probes which namespaces this machine
// allows, by running an empty program with each level of confinement.
func New(cfg Config) (*Sandbox, error) {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Parallel <= 0 {
		cfg.Parallel = runtime.GOMAXPROCS(0)
	}
	if cfg.UIDBase <= 0 {
		cfg.UIDBase = 1900000000
	}
	py, err := findPython(cfg.Python)
	if err != nil {
		return nil, err
	}
	root := cfg.TempRoot
	if root == "" {
		root = os.TempDir()
	}
	s := &Sandbox{cfg: cfg, python: py, root: root, isRoot: os.Geteuid() == 0, slots: make(chan int, cfg.Parallel)}
	for i := range cfg.Parallel {
		s.slots <- i
	}
	levels := []Isolation{{NetNamespace: true, PIDNamespace: true, UIDSwitch: s.isRoot, UserNamespace: !s.isRoot}, {}}
	if cfg.NoNamespaces {
		levels = levels[1:]
	}
	var fails []string
	for _, iso := range levels {
		s.iso = iso
		r := s.Run(context.Background(), "import sys\nsys.stdout.write('ok')\n")
		if r.Passed() && r.Stdout == "ok" {
			if len(fails) > 0 {
				s.iso.Notice = "namespaces unavailable (" + strings.Join(fails, "; ") + "); running without them, sockets refused by the audit hook"
				noticeOnce.Do(func() { log.Printf("sandbox: %s", s.iso.Notice) })
			}
			return s, nil
		}
		fails = append(fails, fmt.Sprintf("%+v: %s", iso, r.Summary()))
	}
	return nil, fmt.Errorf("sandbox: %s cannot run a program: %s (set sandbox python to an interpreter every user may execute)", py, strings.Join(fails, "; "))
}

// Isolation reports the confinements in force.
func (s *Sandbox) Isolation() Isolation { return s.iso }

// Python is the interpreter in use.
func (s *Sandbox) Python() string { return s.python }

// Limits are the limits in force.
func (s *Sandbox) Limits() Limits { return s.cfg.Limits }

func findPython(p string) (string, error) {
	if p == "" {
		p = os.Getenv("AIPO_PYTHON")
	}
	if p == "" {
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			p = "/usr/bin/python3"
		} else {
			p = "python3"
		}
	}
	full, err := exec.LookPath(p)
	if err != nil {
		return "", fmt.Errorf("sandbox: python interpreter %q not found: %w (install python3 or set sandbox python / $AIPO_PYTHON)", p, err)
	}
	return full, nil
}

// limitsArg is what the bootstrap reads.
type limitsArg struct {
	CPU      int64 `json:"cpu"`
	AS       int64 `json:"as"`
	FSize    int64 `json:"fsize"`
	NoFile   int   `json:"nofile"`
	NProc    int   `json:"nproc"`
	BlockNet bool  `json:"block_net"`
}

// Run runs program (Python source) and reports how it ended. It waits for a
// free slot first; ctx bounds the wait and the run.
func (s *Sandbox) Run(ctx context.Context, program string) Result {
	var slot int
	select {
	case slot = <-s.slots:
	case <-ctx.Done():
		return Result{Status: StatusError, Err: fmt.Sprintf("waiting for a sandbox slot: %v", ctx.Err())}
	}
	defer func() { s.slots <- slot }()
	return s.run(ctx, program, slot)
}

// run runs program in a fresh working directory as slot's process, within
// the limits, and reports how it ended.
func (s *Sandbox) run(ctx context.Context, program string, slot int) Result {
	lim := s.cfg.Limits
	dir, err := os.MkdirTemp(s.root, "aipo-sandbox-*")
	if err != nil {
		return Result{Status: StatusError, Err: fmt.Sprintf("working directory: %v", err)}
	}
	defer os.RemoveAll(dir)
	prog := filepath.Join(dir, "program.py")
	if err := os.WriteFile(prog, []byte(program), 0o644); err != nil {
		return Result{Status: StatusError, Err: fmt.Sprintf("write program: %v", err)}
	}
	attr, nproc, err := s.isolation(dir, prog, slot)
	if err != nil {
		return Result{Status: StatusError, Err: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	cmd := s.command(dir, prog, attr, nproc)
	stdout := &capBuffer{max: lim.OutputBytes}
	stderr := &capBuffer{max: lim.OutputBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{Status: StatusError, Err: fmt.Sprintf("start %s: %v", s.python, err)}
	}
	werr, timedOut := waitOrKill(ctx, cmd)
	r := Result{Duration: time.Since(start), Stdout: stdout.String(), Stderr: stderr.String()}
	setStatus(&r, cmd, werr, lim.CPUTime)
	if timedOut && ctx.Err() != nil {
		r.Status = StatusTimeout
	}
	return r
}

// isolation is how slot's process is set apart (namespaces, and its own
// uid where the sandbox can switch uids, which then owns dir and prog) and
// the process limit it runs under: its own processes plus, where its uid is
// shared, those the uid already has (0: no limit).
func (s *Sandbox) isolation(dir, prog string, slot int) (*syscall.SysProcAttr, int, error) {
	uid := s.cfg.UIDBase + slot
	nproc := 1 + s.cfg.Limits.Processes
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	iso := s.iso
	if iso.NetNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if iso.PIDNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWPID
	}
	switch {
	case iso.UIDSwitch:
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
		for _, p := range []string{dir, prog} {
			if err := os.Chown(p, uid, uid); err != nil {
				return nil, 0, fmt.Errorf("hand the working directory to uid %d: %v", uid, err)
			}
		}
	case iso.UserNamespace:
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		nproc += userProcesses(os.Getuid())
	default:
		if s.isRoot {
			nproc = 0 // RLIMIT_NPROC does not bind root; rely on the timeout
		} else {
			nproc += userProcesses(os.Getuid())
		}
	}
	return attr, nproc, nil
}

// command is the interpreter running the bootstrap, which sets the limits
// (nproc processes) and runs prog in dir with a minimal environment.
func (s *Sandbox) command(dir, prog string, attr *syscall.SysProcAttr, nproc int) *exec.Cmd {
	lim := s.cfg.Limits
	args, _ := json.Marshal(limitsArg{
		CPU:      int64((lim.CPUTime + time.Second - 1) / time.Second),
		AS:       lim.MemoryBytes,
		FSize:    lim.FileBytes,
		NoFile:   lim.OpenFiles,
		NProc:    nproc,
		BlockNet: !s.iso.NetNamespace,
	})
	flags := []string{"-I", "-B"}
	if !s.cfg.SitePackages {
		flags = append(flags, "-S")
	}
	cmd := exec.Command(s.python, append(flags, "-c", bootstrap, string(args), prog)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8",
		"PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1", "PYTHONIOENCODING=utf-8"}
	cmd.SysProcAttr = attr
	cmd.WaitDelay = time.Second
	return cmd
}

// waitOrKill waits for the started cmd, killing its process group when ctx
// ends first (timedOut), and kills what the program left in its group once
// it has ended.
func waitOrKill(ctx context.Context, cmd *exec.Cmd) (werr error, timedOut bool) {
	pid := cmd.Process.Pid
	done := make(chan struct{})
	var killed atomic.Bool
	go func() {
		select {
		case <-ctx.Done():
			killed.Store(true)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	werr = cmd.Wait()
	close(done)
	// Processes the program left in its group (without a PID namespace
	// they outlive it) go too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return werr, killed.Load()
}

// setStatus sets r's status, exit code and signal from how cmd ended (werr,
// Wait's error); a process killed near cpuTime ran out of CPU time.
func setStatus(r *Result, cmd *exec.Cmd, werr error, cpuTime time.Duration) {
	var ee *exec.ExitError
	switch {
	case werr == nil:
		r.Status = StatusOK
	case errors.As(werr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		r.ExitCode = ee.ExitCode()
		r.Status = StatusFailed
		if ws.Signaled() {
			r.Signal = ws.Signal().String()
			// At the CPU limit the kernel sends SIGXCPU, or SIGKILL to a
			// namespace's init, which ignores SIGXCPU.
			used := ee.UserTime() + ee.SystemTime()
			if ws.Signal() == syscall.SIGXCPU || (ws.Signal() == syscall.SIGKILL && used >= cpuTime*9/10) {
				r.Status = StatusTimeout
			}
		}
	case errors.Is(werr, exec.ErrWaitDelay):
		r.Status = StatusOK
		if ps := cmd.ProcessState; ps != nil && !ps.Success() {
			r.Status, r.ExitCode = StatusFailed, ps.ExitCode()
		}
	default:
		r.Status, r.Err = StatusError, werr.Error()
	}
}

// userProcesses counts the processes owned by uid (for RLIMIT_NPROC, which
// counts every process of the real uid).
func userProcesses(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
				n++
			}
		}
	}
	return n
}

// capBuffer keeps the first max bytes written to it and counts the rest.
type capBuffer struct {
	max     int
	buf     bytes.Buffer
	dropped int
	mu      sync.Mutex
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
	} else {
		if room > 0 {
			c.buf.Write(p[:room])
		}
		c.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.ToValidUTF8(c.buf.String(), "\uFFFD")
	if c.dropped > 0 {
		s += fmt.Sprintf("\n[%d more bytes dropped]", c.dropped)
	}
	return s
}
