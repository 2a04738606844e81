package parquetio

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func init() {
	register.DoFn2x0[int, func(schemas.Trajectory)](&genLongFn{})
	register.Function2x0[schemas.Trajectory, func(int64)](rawBytesFn)
	register.Emitter1[int64]()
	register.Function2x1[int64, int64, int64](sumInt64)
	register.DoFn1x1[int64, error](&checkSumFn{})
}

// longTrajectory is a trajectory of the benchmark's shape: a 200-token
// prompt, a response of `tokens` tokens with one 100-token Knowledge Agent
// span in the middle, and about four bytes of text per response token.
func longTrajectory(rng *rand.Rand, idx, tokens int) schemas.Trajectory {
	t := schemas.Trajectory{
		SchemaVersion: schemas.SchemaVersion, Run: "bench", Step: 1, PolicyVersion: 0,
		PromptID: fmt.Sprintf("p-%06d", idx/8), SampleIndex: int32(idx % 8), DataSource: "math/dapo",
		PromptIDs:        make([]int32, 200),
		ResponseIDs:      make([]int32, tokens),
		TokenSource:      make([]int8, tokens),
		BehaviorLogProbs: make([]float32, tokens),
		ResponseText:     randText(rng, tokens/2),
		Reward:           1, Correct: true, Advantage: 0.5, FinishReason: sampling.FinishEOS,
	}
	for i := range t.PromptIDs {
		t.PromptIDs[i] = rng.Int32N(151_936)
	}
	a, b := int32(tokens/2), int32(min(tokens, tokens/2+100))
	for i := range tokens {
		t.ResponseIDs[i] = rng.Int32N(151_936)
		if int32(i) >= a && int32(i) < b {
			t.TokenSource[i] = schemas.SourceKnowledge
		} else {
			t.BehaviorLogProbs[i] = -float32(rng.ExpFloat64())
		}
	}
	t.InteractionAgent = []string{"knowledge"}
	t.InteractionQuery = []string{randText(rng, 12)}
	t.InteractionResult = []string{randText(rng, 60)}
	t.InteractionStatus = []string{schemas.StatusOK}
	t.InteractionLatencyMs = []float32{812}
	t.InteractionSpanStart, t.InteractionSpanEnd = []int32{a}, []int32{b}
	t.InteractionNoisy = []bool{false}
	return t
}

// rawBytes is the uncompressed payload of a row: 4 bytes per id, log-prob
// and latency, 1 per source and flag, the strings' lengths, 8 per scalar.
func rawBytes(t *schemas.Trajectory) int64 {
	n := 4*len(t.PromptIDs) + 4*len(t.ResponseIDs) + len(t.TokenSource) + 4*len(t.BehaviorLogProbs) +
		len(t.ResponseText) + len(t.Run) + len(t.PromptID) + len(t.DataSource) + len(t.FinishReason) +
		13*len(t.InteractionAgent) + 8*8
	for i := range t.InteractionAgent {
		n += len(t.InteractionAgent[i]) + len(t.InteractionQuery[i]) + len(t.InteractionResult[i]) + len(t.InteractionStatus[i])
	}
	return int64(n)
}

// genLongFn emits PerSeed benchmark trajectories for each seed.
type genLongFn struct {
	PerSeed, Tokens int
}

func (fn *genLongFn) ProcessElement(seed int, emit func(schemas.Trajectory)) {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := range fn.PerSeed {
		emit(longTrajectory(rng, seed*fn.PerSeed+i, fn.Tokens))
	}
}

func sumInt64(a, b int64) int64 { return a + b }

// checkSumFn fails unless its one input equals Want.
type checkSumFn struct{ Want int64 }

func (fn *checkSumFn) ProcessElement(n int64) error {
	if n != fn.Want {
		return fmt.Errorf("the Beam source read %d raw bytes, the sink wrote %d", n, fn.Want)
	}
	return nil
}

func rawBytesFn(t schemas.Trajectory, emit func(int64)) { emit(rawBytes(&t)) }

// BenchmarkSinkSource writes 10,000 trajectories of 2,000 tokens through the
// Beam sink and reads them back through the Beam source (prism, local disk),
// and does the same with the plain Go writer and reader (schemas.WriteStep,
// schemas.ReadStep) in the same run. Both write timings include generating
// the rows (inside the pipeline for Beam), so their ratio is the cost of
// running the sink under Beam. MB/s are of raw (uncompressed) row bytes.
// With -short (make bench-smoke) it writes 64 trajectories of 200 tokens.
func BenchmarkSinkSource(b *testing.B) {
	rows, tokens, seeds := 10_000, 2_000, 8
	if testing.Short() {
		rows, tokens = 64, 200
	}
	ctx := context.Background()
	for range b.N {
		root := b.TempDir()

		start := time.Now()
		shards := make([][]schemas.Trajectory, seeds)
		var raw int64
		for seed := range seeds {
			fn := &genLongFn{PerSeed: rows / seeds, Tokens: tokens}
			fn.ProcessElement(seed, func(t schemas.Trajectory) {
				shards[seed] = append(shards[seed], t)
				raw += rawBytes(&t)
			})
		}
		plainDir := rundir.Step(root+"/plain", 1)
		if _, err := schemas.WriteStep(ctx, plainDir, shards, schemas.Manifest{Run: "bench", Step: 1}); err != nil {
			b.Fatal(err)
		}
		plainWrite := time.Since(start)

		start = time.Now()
		got, _, err := schemas.ReadStep[schemas.Trajectory](ctx, plainDir)
		if err != nil || len(got) != rows {
			b.Fatalf("plain reader: %d rows, %v", len(got), err)
		}
		plainRead := time.Since(start)
		got, shards = nil, nil

		beamDir := rundir.Step(root+"/beam", 1)
		p, s := beam.NewPipelineWithRoot()
		seedList := make([]int, seeds)
		for i := range seedList {
			seedList[i] = i
		}
		gen := beam.ParDo(s, &genLongFn{PerSeed: rows / seeds, Tokens: tokens}, beam.CreateList(s, seedList))
		WriteTrajectories(s, beamDir, StepMeta{Run: "bench", Step: 1}, gen)
		start = time.Now()
		if err := ptest.Run(p); err != nil {
			b.Fatal(err)
		}
		beamWrite := time.Since(start)

		p, s = beam.NewPipelineWithRoot()
		sizes := beam.ParDo(s, rawBytesFn, ReadTrajectories(s, beamDir))
		beam.ParDo0(s, &checkSumFn{Want: raw}, beam.Combine(s, sumInt64, sizes))
		start = time.Now()
		if err := ptest.Run(p); err != nil {
			b.Fatal(err)
		}
		beamRead := time.Since(start)

		mb := float64(raw) / 1e6
		b.ReportMetric(mb/beamWrite.Seconds(), "sink_MB/s")
		b.ReportMetric(mb/plainWrite.Seconds(), "plain_write_MB/s")
		b.ReportMetric(plainWrite.Seconds()/beamWrite.Seconds(), "sink/plain")
		b.ReportMetric(mb/beamRead.Seconds(), "source_MB/s")
		b.ReportMetric(mb/plainRead.Seconds(), "plain_read_MB/s")
		b.ReportMetric(plainRead.Seconds()/beamRead.Seconds(), "source/plain")
	}
}
