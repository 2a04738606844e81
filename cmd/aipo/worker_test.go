package main

import (
	"flag"
	"strings"
	"testing"
)

func TestWorkerInvocation(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		// What the Go SDK's boot program passes (container/boot.go).
		{[]string{"--worker=true", "--id=1", "--logging_endpoint=localhost:1", "--control_endpoint=localhost:2", "--semi_persist_dir=/tmp"}, true},
		{[]string{"--id=1", "-worker"}, true},
		{[]string{"analyze", "--worker=true"}, false},
		{[]string{"--id=1"}, false},
		{[]string{"--worker=false"}, false},
		{nil, false},
	} {
		if got := workerInvocation(c.args); got != c.want {
			t.Errorf("workerInvocation(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// aipo train keeps its workers in process: remote runners are refused with
// the way to run them, LOOPBACK and the local runner are accepted.
func TestTrainRefusesRemoteWorkers(t *testing.T) {
	set := func(name, v string) {
		f := flag.Lookup(name)
		if f == nil {
			t.Fatalf("flag --%s is not registered", name)
		}
		old := f.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	for _, c := range []struct {
		runner, env string
		ok          bool
	}{{"", "", true}, {"prism", "", true}, {"universal", "LOOPBACK", true}, {"universal", "PROCESS", false}, {"dataflow", "", false}, {"flink", "DOCKER", false}} {
		set("runner", c.runner)
		set("environment_type", c.env)
		err := inProcessWorkers()
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "aipo serve --watch") {
			t.Errorf("--runner=%q --environment_type=%q: %v (want accepted: %v)", c.runner, c.env, err, c.ok)
		}
	}
}
