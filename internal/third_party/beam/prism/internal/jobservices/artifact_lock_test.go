// This test is aipo's, not Beam's: it guards the change of artifact.go in
// this copy (the artifact map under the server's lock).

package jobservices

import (
	"fmt"
	"io"
	"sync"
	"testing"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
)

// stagingStream plays the submitting side of ReverseArtifactRetrievalService
// for one job: its staging token, then one chunk and the end of each
// artifact asked for.
type stagingStream struct {
	grpc.ServerStream
	replies []*jobpb.ArtifactResponseWrapper
}

func (s *stagingStream) Send(*jobpb.ArtifactRequestWrapper) error { return nil }

func (s *stagingStream) Recv() (*jobpb.ArtifactResponseWrapper, error) {
	if len(s.replies) == 0 {
		return nil, io.EOF
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, nil
}

// retrievalStream collects what GetArtifact sends a worker.
type retrievalStream struct {
	grpc.ServerStream
	data []byte
}

func (s *retrievalStream) Send(r *jobpb.GetArtifactResponse) error {
	s.data = append(s.data, r.GetData()...)
	return nil
}

// Jobs staged at once, and their workers fetching the artifacts, share the
// server's artifact map. Run under the race detector (make race-prism),
// this reports the unguarded map of Beam's artifact.go every time; without
// it, a lost write shows as an artifact the server cannot provide, or the
// process dies with "concurrent map writes".
func TestArtifactsStagedAtOnce(t *testing.T) {
	s, err := NewServer(0, func(*Job) {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	const jobs = 16
	for i := range jobs {
		dep := &pipepb.ArtifactInformation{TypeUrn: "beam:artifact:type:file:v1", TypePayload: fmt.Appendf(nil, "worker-%d", i)}
		s.jobs[fmt.Sprint("job-", i)] = &Job{Pipeline: &pipepb.Pipeline{Components: &pipepb.Components{
			Environments: map[string]*pipepb.Environment{"go": {Dependencies: []*pipepb.ArtifactInformation{dep}}},
		}}}
	}
	start := make(chan struct{})
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			key, want := fmt.Sprint("job-", i), fmt.Sprint("bytes of worker ", i)
			stage := &stagingStream{replies: []*jobpb.ArtifactResponseWrapper{
				{StagingToken: key},
				{Response: &jobpb.ArtifactResponseWrapper_GetArtifactResponse{GetArtifactResponse: &jobpb.GetArtifactResponse{Data: []byte(want)}}},
				{IsLast: true},
			}}
			<-start
			if err := s.ReverseArtifactRetrievalService(stage); err != nil {
				errs[i] = fmt.Errorf("staging %s: %w", key, err)
				return
			}
			dep := s.jobs[key].Pipeline.GetComponents().GetEnvironments()["go"].GetDependencies()[0]
			got := &retrievalStream{}
			if err := s.GetArtifact(&jobpb.GetArtifactRequest{Artifact: dep}, got); err != nil {
				errs[i] = fmt.Errorf("fetching %s's artifact: %w", key, err)
				return
			}
			if string(got.data) != want {
				errs[i] = fmt.Errorf("%s's artifact: got %q, want %q", key, got.data, want)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
