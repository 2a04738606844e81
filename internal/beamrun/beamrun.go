// Package beamrun runs aipo's Beam pipelines. On the local runner (Beam's
// --runner flag empty or prism) a pipeline goes to a prism job server in
// this process that listens on 127.0.0.1 only (the copy of Beam's prism in
// internal/third_party/beam: Beam's own listens on every interface, with
// no option), and its SDK workers run in this process (LOOPBACK). Several
// pipelines may run at once. Every other runner is Beam's, chosen by
// --runner as beamx.Run chooses it. Beam's prism is not linked (tests link
// it through ptest, and run on this package's runner instead with
// ptest.MainWithDefault(m, beamrun.Runner)).
//
// Loopback submissions, on the local runner or on a portable job server
// (--runner=universal or portable with --environment_type=LOOPBACK), go
// through Submit here rather than Beam's universal runner, which leaves an
// open, empty temporary file behind per pipeline.
package beamrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/third_party/beam/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/metricsx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/runnerlib"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/vet"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"

	// What beamx.Run links but Beam's prism: the reflection-optimised
	// runtime, the gs:// and local file systems, and the runners that
	// --runner may name (universal is imported above).
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec/optimized"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/gcs"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/dataflow"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/direct"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/dot"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/flink"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/spark"
)

// Runner is the name this package registers its local runner under with
// Beam, for ptest.MainWithDefault and beam.Run. --runner=prism (or none)
// picks it too when a pipeline runs through Run.
const Runner = "aipo-prism"

func init() {
	beam.RegisterRunner(Runner, func(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
		return local(ctx, p)
	})
}

// dialTimeout bounds the connection to a job server.
const dialTimeout = 2 * time.Minute

// Run runs p on the runner named by Beam's --runner flag (the local prism
// when empty) and waits for it to finish.
func Run(ctx context.Context, p *beam.Pipeline) error {
	_, err := Execute(ctx, p)
	return err
}

// Execute is Run returning the pipeline's result (its metrics).
func Execute(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
	switch strings.ToLower(*runners.Runner) {
	case "", "prism", "prismrunner", Runner:
		return local(ctx, p)
	case "universal", "portable", "portablerunner":
		if jobopts.IsLoopback() {
			endpoint, err := jobopts.GetEndpoint()
			if err != nil {
				return nil, err
			}
			return Submit(ctx, p, endpoint)
		}
		return universal.Execute(ctx, p)
	}
	return beam.Run(ctx, *runners.Runner, p)
}

var (
	serverMu sync.Mutex
	server   *prism.JobServer
)

// Endpoint returns the address of this process's prism job server,
// starting it on the first call. It listens on 127.0.0.1 and runs until the
// process exits.
func Endpoint() (string, error) {
	serverMu.Lock()
	defer serverMu.Unlock()
	if server == nil {
		s, err := prism.Start(0)
		if err != nil {
			return "", fmt.Errorf("start the local runner (prism): %w", err)
		}
		server = s
	}
	return server.Endpoint(), nil
}

// local runs p on prism: the job server of --endpoint when one is set (as
// Beam's prism runner does), else this process's own. Its workers are
// LOOPBACK unless --environment_type names another kind, which needs a job
// server of its own (--endpoint).
func local(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
	if *jobopts.Endpoint != "" {
		if *jobopts.EnvironmentType == "" || jobopts.IsLoopback() {
			return Submit(ctx, p, *jobopts.Endpoint)
		}
		return universal.Execute(ctx, p)
	}
	if *jobopts.EnvironmentType != "" && !jobopts.IsLoopback() {
		return nil, fmt.Errorf("--environment_type=%s: the in-process prism runs its workers in this process (LOOPBACK); "+
			"for %s workers start a job server (internal/beamrun/cmd/prism, Flink's) and pass --runner=universal --endpoint=HOST:PORT",
			*jobopts.EnvironmentType, *jobopts.EnvironmentType)
	}
	endpoint, err := Endpoint()
	if err != nil {
		return nil, err
	}
	return Submit(ctx, p, endpoint)
}

// Submit runs p on the job server at endpoint with LOOPBACK workers (SDK
// workers in this process, served on a port of localhost) and waits for
// it to finish. It is Beam's universal runner for LOOPBACK, except that the
// empty file it stages as the worker binary (a job server wants one; no
// worker runs it) is closed and removed when the job has been staged.
func Submit(ctx context.Context, p *beam.Pipeline, endpoint string) (beam.PipelineResult, error) {
	if !beam.Initialized() {
		return nil, errors.New("beam.Init() was not called before the pipeline was built; call it at the start of main (or use ptest.Main in tests)")
	}
	if *jobopts.Strict {
		if _, err := vet.Execute(ctx, p); err != nil {
			return nil, fmt.Errorf("strictness check failed: %w", err)
		}
	}
	edges, _, err := p.Build()
	if err != nil {
		return nil, err
	}
	workers, err := extworker.StartLoopback(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("start the loopback worker pool: %w", err)
	}
	defer workers.Stop(ctx)

	xlangx.ResolveArtifacts(ctx, edges, nil)
	env, err := graphx.CreateEnvironment(ctx, graphx.URNEnvExternal, workers.EnvironmentConfig)
	if err != nil {
		return nil, fmt.Errorf("generating model pipeline: %w", err)
	}
	model, err := graphx.Marshal(edges, &graphx.Options{
		Environment:           env,
		PipelineResourceHints: jobopts.GetPipelineResourceHints(),
	})
	if err != nil {
		return nil, fmt.Errorf("generating model pipeline: %w", err)
	}
	jobID, client, closeConn, err := stageAndSubmit(ctx, model, endpoint)
	if err != nil {
		return nil, err
	}
	defer closeConn()
	if *jobopts.Async {
		return &result{jobID: jobID}, nil
	}
	waitErr := runnerlib.WaitForCompletion(ctx, client, jobID)
	res, err := newResult(ctx, client, jobID, model)
	if waitErr != nil {
		return res, waitErr
	}
	return res, err
}

// stageAndSubmit prepares the job, stages its placeholder worker binary
// and submits it; the placeholder is gone when it returns.
func stageAndSubmit(ctx context.Context, model *pipepb.Pipeline, endpoint string) (string, jobpb.JobServiceClient, func(), error) {
	f, err := os.CreateTemp("", "aipo-loopback-worker-*")
	if err != nil {
		return "", nil, nil, fmt.Errorf("create the placeholder worker file in %s (set TMPDIR to a writable directory): %w", os.TempDir(), err)
	}
	bin := f.Name()
	defer os.Remove(bin)
	if err := f.Close(); err != nil {
		return "", nil, nil, err
	}
	if err := runnerlib.UpdateGoEnvironmentWorker(bin, model); err != nil {
		return "", nil, nil, err
	}
	cc, err := grpcx.Dial(ctx, endpoint, dialTimeout)
	if err != nil {
		return "", nil, nil, fmt.Errorf("connect to the job server at %s (--endpoint): %w", endpoint, err)
	}
	client := jobpb.NewJobServiceClient(cc)
	opt := &runnerlib.JobOptions{
		Name:         jobopts.GetJobName(),
		Experiments:  jobopts.GetExperiments(),
		RetainDocker: *jobopts.RetainDockerContainers,
		Parallelism:  *jobopts.Parallelism,
		Loopback:     true,
	}
	prepID, artifactEndpoint, token, err := runnerlib.Prepare(ctx, client, model, opt)
	if err == nil {
		token, err = runnerlib.Stage(ctx, prepID, artifactEndpoint, bin, token)
	}
	var jobID string
	if err == nil {
		jobID, err = runnerlib.Submit(ctx, client, prepID, token)
	}
	if err != nil {
		cc.Close()
		return "", nil, nil, err
	}
	return jobID, client, func() { cc.Close() }, nil
}

// result is a finished job's ID and metrics.
type result struct {
	jobID   string
	metrics *metrics.Results
}

func (r *result) Metrics() metrics.Results {
	if r.metrics == nil {
		return metrics.Results{}
	}
	return *r.metrics
}

func (r *result) JobID() string { return r.jobID }

func newResult(ctx context.Context, client jobpb.JobServiceClient, jobID string, model *pipepb.Pipeline) (*result, error) {
	res := &result{jobID: jobID}
	resp, err := client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: jobID})
	if err != nil {
		return res, fmt.Errorf("job %s: read its metrics: %w", jobID, err)
	}
	m := resp.GetMetrics()
	res.metrics = metricsx.FromMonitoringInfos(model, m.GetAttempted(), m.GetCommitted())
	return res, nil
}
