package analytics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/parquet-go/parquet-go"
)

func init() {
	beam.RegisterType(reflect.TypeOf((*schemas.Trajectory)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*shardRef)(nil)).Elem())
	register.DoFn3x1[context.Context, shardRef, func(schemas.Trajectory), error](&readShardFn{})
	register.Emitter1[schemas.Trajectory]()
}

// shardRef is one committed shard of one step.
type shardRef struct {
	Dir    string
	Path   string
	Rows   int64
	Bytes  int64
	SHA256 string
}

// readTrajectories reads the shards of the planned steps, one shard per
// element, verifying each against its manifest entry.
//
// Output: PCollection<schemas.Trajectory>.
func readTrajectories(s beam.Scope, steps []StepRef) beam.PCollection {
	s = s.Scope("analytics.ReadTrajectories")
	var refs []shardRef
	for _, st := range steps {
		for _, f := range st.Files {
			refs = append(refs, shardRef{Dir: st.Dir, Path: f.Path, Rows: f.Rows, Bytes: f.Bytes, SHA256: f.SHA256})
		}
	}
	if len(refs) == 0 {
		return beam.CreateList(s, []schemas.Trajectory{})
	}
	return beam.ParDo(s, &readShardFn{}, beam.Reshuffle(s, beam.CreateList(s, refs)))
}

// readShardFn verifies one shard and emits its rows.
type readShardFn struct{}

// readBatch is the number of rows decoded per call.
const readBatch = 64

func (f *readShardFn) ProcessElement(ctx context.Context, ref shardRef, emit func(schemas.Trajectory)) error {
	entry := schemas.ManifestFile{Path: ref.Path, Rows: ref.Rows, Bytes: ref.Bytes, SHA256: ref.SHA256}
	b, err := schemas.VerifyFile(ctx, ref.Dir, entry)
	if err != nil {
		return err
	}
	r := parquet.NewGenericReader[schemas.Trajectory](bytes.NewReader(b))
	defer r.Close()
	buf := make([]schemas.Trajectory, readBatch)
	var n int64
	for {
		// Fresh rows each batch: emitted rows must not share slices with
		// the next batch.
		clear(buf)
		k, err := r.Read(buf)
		for i := 0; i < k; i++ {
			emit(buf[i])
		}
		n += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read shard %s/%s: %w", ref.Dir, ref.Path, err)
		}
		if k == 0 {
			break
		}
	}
	if n != ref.Rows {
		return fmt.Errorf("shard %s/%s holds %d rows, its manifest says %d (rewrite the step)", ref.Dir, ref.Path, n, ref.Rows)
	}
	return nil
}
