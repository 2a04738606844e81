// Package prism is the job server of Apache Beam's prism runner (Beam Go
// SDK v2.77.0, runners/prism), kept in this repository with the changes
// that internal/third_party/beam/README.md lists: it listens on 127.0.0.1
// only, and its artifact map is safe for jobs staged at once. Beam's own
// package starts its server on every interface and offers no option to
// change that, so aipo runs its pipelines on this copy (internal/beamrun).
//
// This file is aipo's, in place of Beam's prism.go (which registered the
// runner and started the server on every interface); the files under
// internal/ are Beam's, under the Apache License 2.0 of
// internal/third_party/beam/LICENSE.
package prism

import (
	"github.com/aipo-rl/aipo/internal/third_party/beam/prism/internal"
	"github.com/aipo-rl/aipo/internal/third_party/beam/prism/internal/jobservices"
)

// JobServer is a prism job management server in this process: it takes
// jobs over Beam's job API and runs them with prism's engine, with their
// SDK workers connecting back to the same port.
type JobServer struct {
	s *jobservices.Server
}

// Start starts a job server on port of 127.0.0.1 (0: one the kernel
// picks).
func Start(port int) (*JobServer, error) {
	s, err := jobservices.NewServer(port, internal.RunPipeline)
	if err != nil {
		return nil, err
	}
	go s.Serve()
	return &JobServer{s: s}, nil
}

// Endpoint is the address the server listens on, 127.0.0.1:PORT.
func (j *JobServer) Endpoint() string { return j.s.Endpoint() }

// Stop stops accepting jobs and returns once the running calls end.
func (j *JobServer) Stop() { j.s.Stop() }
