package beamrun

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/netcheck"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
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
