package parquetio

import (
	"os"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestDebugListeners(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	passert.Count(s, beam.CreateList(s, []int{1, 2}), "n", 2)
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if len(fs) > 3 && fs[3] == "0A" {
				t.Logf("%s LISTEN %s", f, fs[1])
			}
		}
	}
}
