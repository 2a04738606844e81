package analytics

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// The train loop submits a step's rollout while the previous one or an
// evaluation still runs, so one process hands prism several jobs at once.
// Beam's prism writes a map shared by all jobs in artifact staging without
// its lock, and two jobs staging together killed the process with "fatal
// error: concurrent map writes" (the copy in internal/third_party/beam,
// which internal/beamrun runs, takes the lock). Rounds of
// jobs submitted together must all finish with the right report. A lost
// race shows as the whole test binary dying, not as a failed assertion, and
// the runtime notices it only when two writes overlap: rare (360 jobs in
// rounds of 12 passed on the unpatched SDK). make race-prism runs this test
// under the race detector, and with it TestArtifactsStagedAtOnce of the
// copy's jobservices package, which stages jobs at once on the server alone
// and has the detector report Beam's unguarded map every time (through the
// whole pipeline path, gRPC's own locks may order the two writes and hide
// it from the detector).
func TestPipelinesAtOnceInOneProcess(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	plan, err := Discover(context.Background(), run, AllSteps)
	if err != nil {
		t.Fatal(err)
	}
	// The first pipeline of a process starts prism's in-process server
	// (internal/beamrun starts it under a lock); the train loop runs its
	// first rollout alone, and so does this test.
	first := filepath.Join(t.TempDir(), "analysis-first")
	runPipeline(t, run, first, AllSteps)
	checkReport(t, run, readReport(t, first))
	const rounds, jobs = 2, 4
	for r := range rounds {
		outs := make([]string, jobs)
		errs := make([]error, jobs)
		var wg sync.WaitGroup
		for i := range jobs {
			outs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("analysis-%d-%d", r, i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, s := beam.NewPipelineWithRoot()
				Build(s, plan, outs[i])
				errs[i] = ptest.Run(p)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, job %d of %d submitted together: %v", r, i, jobs, err)
			}
			checkReport(t, run, readReport(t, outs[i]))
		}
	}
}
