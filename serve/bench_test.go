package serve

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// BenchmarkTransport measures the same workload (8 concurrent callers, 32
// requests of 16 sampled tokens each per iteration) on the in-process
// engine and through the server over gRPC and HTTP, and reports each
// transport's throughput as a ratio to the engine's.
func BenchmarkTransport(b *testing.B) {
	dir := b.TempDir() + "/step-000003"
	saveCheckpoint(b, dir, testModel(b, 5), 3)
	srv, err := New(context.Background(), Options{Checkpoint: dir, Name: "tiny", Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	gl, hl := listen(b), listen(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, gl, hl, nil, time.Second)
	eng := srv.Engine()
	open := func(uri string) policy.Client {
		c, err := policy.Open(ctx, uri)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	gc := open("grpc://" + gl.Addr().String())
	defer gc.Close()
	hc := open("http://" + hl.Addr().String() + "/v1?model=tiny")
	defer hc.Close()
	const callers, perCaller, tokens = 8, 4, 16
	workload := func(call func(i int) error) time.Duration {
		began := time.Now()
		var wg sync.WaitGroup
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range perCaller {
					if err := call(w*perCaller + k); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(began)
	}
	prefix := []int32{257, 104, 105}
	var tEng, tGRPC, tHTTP time.Duration
	b.ResetTimer()
	for range b.N {
		tEng += workload(func(i int) error {
			_, err := eng.Generate(ctx, engine.Request{Prefix: prefix, Params: sampling.Params{Temperature: 1, Seed: int64(i), MaxTokens: tokens}})
			return err
		})
		tGRPC += workload(func(i int) error {
			_, err := gc.Generate(ctx, policyRequest(prefix, tokens, int64(i)))
			return err
		})
		tHTTP += workload(func(i int) error {
			_, err := hc.Generate(ctx, policyRequest(prefix, tokens, int64(i)))
			return err
		})
	}
	n := float64(b.N * callers * perCaller * tokens)
	b.ReportMetric(n/tEng.Seconds(), "engine_tok/s")
	b.ReportMetric(n/tGRPC.Seconds(), "grpc_tok/s")
	b.ReportMetric(n/tHTTP.Seconds(), "http_tok/s")
	b.ReportMetric(tEng.Seconds()/tGRPC.Seconds(), "grpc/engine")
	b.ReportMetric(tEng.Seconds()/tHTTP.Seconds(), "http/engine")
}
