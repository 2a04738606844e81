package beamrun

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/netcheck"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, Runner) }

// The job server listens on 127.0.0.1 and nowhere else, and one serves
// the whole process.
func TestEndpointIsLoopbackOnly(t *testing.T) {
	ep, err := Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("endpoint %q, want 127.0.0.1:PORT", ep)
	}
	if again, _ := Endpoint(); again != ep {
		t.Errorf("second call: endpoint %q, want the first one's %q", again, ep)
	}
	ls, err := netcheck.Listening()
	if err != nil {
		t.Skip(err)
	}
	found := false
	for _, l := range ls {
		if !l.Loopback() {
			t.Errorf("this process listens on %s, which is not loopback", l)
		}
		found = found || strings.HasSuffix(strings.ToUpper(l.Addr), ":"+hexPort(t, port))
	}
	if !found {
		t.Errorf("no listening socket on port %s among %v", port, ls)
	}
}

// hexPort is port as /proc/net/tcp writes it (four hex digits).
func hexPort(t *testing.T, port string) string {
	t.Helper()
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%04X", n)
}

// A pipeline runs on the local runner, returns its job's ID and leaves no
// placeholder worker file in TMPDIR.
func TestRunLocal(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, s := beam.NewPipelineWithRoot()
	passert.Sum(s, beam.Create(s, 1, 2, 3), "sum", 3, 6)
	res, err := Execute(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.JobID() == "" {
		t.Error("no job ID in the result")
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	if len(left) > 0 {
		t.Errorf("the run left %v in TMPDIR", left)
	}
}

// The in-process prism runs LOOPBACK workers only; another environment
// without a job server of its own is refused with the fix.
func TestLocalRefusesOtherEnvironments(t *testing.T) {
	old := *jobopts.EnvironmentType
	*jobopts.EnvironmentType = "PROCESS"
	defer func() { *jobopts.EnvironmentType = old }()
	p, s := beam.NewPipelineWithRoot()
	beam.Create(s, 1)
	_, err := Execute(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "--environment_type=PROCESS") || !strings.Contains(err.Error(), "--endpoint") {
		t.Fatalf("got %v, want a refusal naming --environment_type=PROCESS and --endpoint", err)
	}
}

func init() { register.DoFn2x1[context.Context, int, error](&waitFn{}) }

// waitFn waits Wait on every element without using the CPU, and records
// the CPU time this process used meanwhile in waitCPU.
type waitFn struct {
	Wait time.Duration `json:"wait"`
}

var waitCPU atomic.Int64 // nanoseconds

func (fn *waitFn) ProcessElement(ctx context.Context, _ int) error {
	before, err := processCPU()
	if err != nil {
		return err
	}
	select {
	case <-time.After(fn.Wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := processCPU()
	if err != nil {
		return err
	}
	waitCPU.Store(int64(after - before))
	return nil
}

// processCPU is the user and system CPU time this process has used.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// While the DoFn of a stage without outputs (a ParDo0 sink, as the eval
// pipeline's chunks are) waits, the runner waits too. Prism's progress
// loop used to spin on the bundle's data channel, which such a stage
// starts with closed: it kept a core busy for the whole bundle, and the
// eval pipeline's in-process engine, starved of it, sampled tens of times
// slower than the same engine outside the pipeline. The waiting DoFn uses
// no CPU and the runner's progress requests (every 100 ms or more) little,
// so the process uses a small part of the wait; the spin used nearly all
// of it on a core (less only on a machine so loaded that it gets a small
// share of one, where this check then misses it rather than failing).
func TestSinkBundleWaitsIdle(t *testing.T) {
	const wait = time.Second
	waitCPU.Store(-1)
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo0(s, &waitFn{Wait: wait}, beam.Create(s, 1))
	if _, err := Execute(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	used := time.Duration(waitCPU.Load())
	if used < 0 {
		t.Fatal("the DoFn did not record the CPU time of its wait")
	}
	if used > wait/4 {
		t.Errorf("the process used %v of CPU while a sink's DoFn waited %v: the runner is busy-waiting on the bundle", used, wait)
	}
	t.Logf("CPU used while the sink waited %v: %v", wait, used)
}
