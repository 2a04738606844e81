package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// workerInvocation reports whether args are those Beam's SDK harness boot
// program starts a worker binary with on Dataflow, Flink and other portable
// runners: flags only (--worker=true --id=... --logging_endpoint=...
// --control_endpoint=... --semi_persist_dir=...), no command name.
func workerInvocation(args []string) bool {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return false
	}
	for _, a := range args {
		switch strings.TrimLeft(a, "-") {
		case "worker", "worker=true", "worker=1":
			return true
		}
	}
	return false
}

// runWorker runs this binary as a Beam SDK worker: the DoFns of every
// pipeline command are linked in, so one binary serves the rollout, eval
// and analytics pipelines. beam.Init hands the process to the SDK harness,
// which serves the runner until it is told to stop and does not return.
func runWorker(args []string) int {
	if err := flag.CommandLine.Parse(args); err != nil {
		return 2
	}
	beam.Init()
	fmt.Fprintln(os.Stderr, "aipo: worker mode: the Beam SDK harness returned; was --worker=true given?")
	return 1
}

// dataflowDryRun reports whether the command was asked to print a Dataflow
// job without submitting it (--runner=dataflow --dry_run). The pipeline then
// runs nowhere: nothing it would write exists afterwards.
func dataflowDryRun() bool {
	r, d := flag.Lookup("runner"), flag.Lookup("dry_run")
	if r == nil || d == nil || d.Value.String() != "true" {
		return false
	}
	switch strings.ToLower(r.Value.String()) {
	case "dataflow", "dataflowrunner":
		return true
	}
	return false
}

// dryRunNote is printed after a dry run in place of the command's results.
const dryRunNote = "dry run: the Dataflow job above was printed, not submitted; the pipeline ran nowhere"
