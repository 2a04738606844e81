package analytics

import (
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// readTrajectories reads the trajectories of the planned (committed) steps
// through parquetio's source, which re-reads each manifest, verifies every
// shard's size and sha256, and validates the rows.
//
// Output: PCollection<schemas.Trajectory>.
func readTrajectories(s beam.Scope, steps []StepRef) beam.PCollection {
	dirs := make([]string, len(steps))
	for i, st := range steps {
		dirs[i] = st.Dir
	}
	return parquetio.ReadTrajectories(s, dirs...)
}
