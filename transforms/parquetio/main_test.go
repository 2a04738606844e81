package parquetio

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// fakeGCS is the in-process GCS server of the tests.
var fakeGCS *fakestorage.Server

// testBucket is the bucket created in the in-process fake GCS server.
const testBucket = "aipo-test"

// TestMain starts an in-process fake GCS server on 127.0.0.1 (a random
// port), points STORAGE_EMULATOR_HOST at it so that every gs:// access of
// the pipelines goes there, and runs the tests on Beam's default runner
// (prism, in process).
func TestMain(m *testing.M) {
	var err error
	fakeGCS, err = fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http",
		Host:   "127.0.0.1",
		// Downloads use the XML API path /<bucket>/<object>, which the
		// server routes only for requests addressed to its public host.
		PublicHost: "127.0.0.1",
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start fake GCS server: %v\n", err)
		os.Exit(2)
	}
	fakeGCS.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: testBucket})
	os.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(fakeGCS.URL(), "http://"))
	code := ptest.MainRetWithDefault(m, beamrun.Runner)
	fakeGCS.Stop()
	os.Exit(code)
}

// backend is a place to write steps: a local temporary directory or a
// prefix in the fake GCS bucket.
type backend struct {
	name string
	root func(t *testing.T) string
}

var backends = []backend{
	{"local", func(t *testing.T) string { return t.TempDir() }},
	{"gcs", func(t *testing.T) string {
		// Test names are unique, so each test writes under its own prefix.
		return "gs://" + testBucket + "/" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	}},
}
