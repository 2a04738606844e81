package main

import "testing"

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
