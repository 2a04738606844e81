package collab_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
	_ "github.com/aipo-rl/aipo/transforms/collab/builtin"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

func TestCurriculum(t *testing.T) {
	// ZeroSearch's schedule with b = 4 from 0 to 0.5 over 200 steps:
	// p = (4^(s/200) - 1) / 3 * 0.5.
	n := collab.Curriculum(0, 0.5, 4, 200)
	cases := map[int64]float64{
		0: 0, 200: 0.5, 400: 0.5, -5: 0,
		100: (2.0 - 1) / 3 * 0.5, // 4^0.5 = 2
		50:  (math.Sqrt2 - 1) / 3 * 0.5,
	}
	for step, want := range cases {
		if got := n.P(step); math.Abs(got-want) > 1e-12 {
			t.Errorf("P(%d) = %.15f, want %.15f", step, got, want)
		}
	}
	if got := collab.Curriculum(0.1, 0.4, 0, 10).P(5); math.Abs(got-(0.1+0.3/3)) > 1e-12 {
		t.Errorf("base 0 (= 4): P(5 of 10) from 0.1 to 0.4 = %g, want %g", got, 0.1+0.3/3)
	}
	if got := collab.ConstantNoise(0.2).P(123); got != 0.2 {
		t.Errorf("constant 0.2: P = %g", got)
	}
	for _, bad := range []collab.Noise{
		{Start: -0.1, End: 0.5, TotalSteps: 10}, {Start: 0, End: 1.5, TotalSteps: 10}, {Start: 0, End: 0.5, Base: 1, TotalSteps: 10},
		{Start: 0, End: 0.5}, func() collab.Noise { n := collab.ConstantNoise(0.2); n.End = 0.5; return n }(), collab.ConstantNoise(2),
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
}

func TestDeriveSeed(t *testing.T) {
	seen := map[uint64]string{}
	for step := int64(0); step < 4; step++ {
		for _, p := range []string{"a", "b"} {
			for s := 0; s < 4; s++ {
				for c := 0; c < 3; c++ {
					v := collab.DeriveSeed(7, step, p, s, c)
					if v != collab.DeriveSeed(7, step, p, s, c) {
						t.Fatal("DeriveSeed is not a function of its inputs")
					}
					key := strings.Join([]string{string(rune('0' + step)), p, string(rune('0' + s)), string(rune('0' + c))}, "/")
					if prev, dup := seen[v]; dup {
						t.Fatalf("DeriveSeed collides for %s and %s", prev, key)
					}
					seen[v] = key
				}
			}
		}
	}
	if collab.DeriveSeed(7, 0, "a", 0, 0) == collab.DeriveSeed(8, 0, "a", 0, 0) {
		t.Error("DeriveSeed ignores the run seed")
	}
}

func TestParseConfig(t *testing.T) {
	good := `
common: &common
  kind: openai
  endpoint: http://127.0.0.1:8000/v1
  model: m
knowledge:
  kind: builtin-demo
  noise: {start: 0, end: 0.5, total_steps: 200}
verify: {kind: builtin-demo, timeout: 250ms, retries: 0}
`
	// "common" is not a field: unknown fields are errors.
	if _, err := collab.ParseConfig([]byte(good), "c.yaml"); err == nil || !strings.Contains(err.Error(), "common") {
		t.Fatalf("unknown top-level field: err = %v, want one naming it", err)
	}
	good = strings.Replace(good, "common: &common\n  kind: openai\n  endpoint: http://127.0.0.1:8000/v1\n  model: m\n", "", 1)
	c, err := collab.ParseConfig([]byte(good), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Verify.Timeout != 250*time.Millisecond || c.Verify.Retries == nil || *c.Verify.Retries != 0 {
		t.Errorf("verify = %+v, want timeout 250ms and retries 0", *c.Verify)
	}
	d := c.Verify.WithDefaults()
	if *d.Retries != 0 || d.MaxConcurrency != collab.DefaultMaxConcurrency || !*d.Cache || d.Breaker.Failures != collab.DefaultBreakerFailures {
		t.Errorf("defaults = %+v", d)
	}
	if p := c.Knowledge.NoiseSchedule().P(200); p != 0.5 {
		t.Errorf("knowledge noise at the last step = %g, want 0.5", p)
	}
	bad := map[string]string{
		"verify: {kind: builtin-demo, tiemout: 1s}":                            "tiemout",
		"verify: {kind: magic}":                                                "unknown kind",
		"verify: {}":                                                           "kind is missing",
		"verify: {kind: openai, model: m}":                                     "endpoint",
		"verify: {kind: openai, endpoint: http://x}":                           "model",
		"verify: {kind: builtin-demo, noise: {constant: 0.2}}":                 "knowledge role only",
		"knowledge: {kind: builtin-demo, noise: {constant: 1.2}}":              "probability",
		"verify: {kind: grpc, endpoint: h:1, api_key_env: A, api_key_file: f}": "not both",
		"verify: {kind: builtin-demo, retries: -1}":                            "retries",
		"": "no roles",
		"verify: {kind: builtin-demo}\ndemo_task: {num_entities: 1}": "demo_task",
	}
	for in, want := range bad {
		if _, err := collab.ParseConfig([]byte(in), "bad.yaml"); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("ParseConfig(%q) = %v, want an error naming bad.yaml and containing %q", in, err, want)
		}
	}
}

func TestSecrets(t *testing.T) {
	const secret = "sk-very-secret-value"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := collab.ParseConfig([]byte("verify: {kind: grpc, endpoint: 127.0.0.1:1, api_key_file: key}"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithBaseDir(dir)
	if got, err := c.Secret(*c.Verify); err != nil || got != secret {
		t.Fatalf("secret from a file relative to the config: %q, %v", got, err)
	}
	t.Setenv("AIPO_TEST_KEY", "  "+secret+" ")
	if got, err := collab.ReadSecret("AIPO_TEST_KEY", ""); err != nil || got != secret {
		t.Fatalf("secret from env: %q, %v", got, err)
	}
	if _, err := collab.ReadSecret("AIPO_TEST_KEY_UNSET", ""); err == nil || !strings.Contains(err.Error(), "AIPO_TEST_KEY_UNSET") {
		t.Errorf("unset variable: err = %v, want one naming it", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "two"), []byte(secret+"\n"+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = collab.ReadSecret("", filepath.Join(dir, "two"))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("two-line secret file: err = %v, want an error without the secret", err)
	}
}

// counting is a collaborator that counts its calls and fails while fail
// is set.
type counting struct {
	calls atomic.Int64
	det   bool
	fail  atomic.Bool
	delay time.Duration
}

func (c *counting) Deterministic() bool { return c.det }

func (c *counting) Answer(ctx context.Context, q collab.Query) (collab.Answer, error) {
	c.calls.Add(1)
	time.Sleep(c.delay)
	if c.fail.Load() {
		return collab.Answer{}, &guard.Error{Kind: guard.KindHTTP5xx, Err: errors.New("down")}
	}
	return collab.Answer{Text: q.Text + "!", Noisy: q.Seed%2 == 1}, nil
}

func TestResilientCache(t *testing.T) {
	ctx := context.Background()
	for _, det := range []bool{true, false} {
		inner := &counting{det: det}
		r := collab.NewResilient(collab.Verify, inner, guard.New(guard.Policy{Retries: 1}, nil, nil), collab.NewCache(100))
		for seed := uint64(0); seed < 4; seed++ {
			for rep := 0; rep < 2; rep++ {
				a, err := r.Answer(ctx, collab.Query{Text: "q", Run: "r", Seed: seed})
				if err != nil || a.Text != "q!" || a.Status != schemas.StatusOK {
					t.Fatalf("det=%v: answer %+v, %v", det, a, err)
				}
			}
		}
		want := int64(4) // one call per seed
		if det {
			want = 1 // one call for the text
		}
		if got := inner.calls.Load(); got != want {
			t.Errorf("det=%v: %d upstream calls for 4 seeds x 2, want %d", det, got, want)
		}
		if got := r.Stats().CacheHits; got != 8-want {
			t.Errorf("det=%v: cache hits %d, want %d", det, got, 8-want)
		}
		// Another run does not share the cache.
		if _, err := r.Answer(ctx, collab.Query{Text: "q", Run: "other"}); err != nil || inner.calls.Load() != want+1 {
			t.Errorf("det=%v: a different run hit the cache (%d calls)", det, inner.calls.Load())
		}
	}
}

func TestResilientFailuresBecomeNotices(t *testing.T) {
	inner := &counting{det: true}
	inner.fail.Store(true)
	r := collab.NewResilient(collab.Knowledge, inner, guard.New(guard.Policy{Retries: 2, BackoffInitial: time.Microsecond}, nil, nil), collab.NewCache(10))
	a, err := r.Answer(context.Background(), collab.Query{Text: "x"})
	if err != nil || a.Status != schemas.StatusError || a.Text != collab.NoticeError {
		t.Fatalf("failing upstream: %+v, %v; want status error with the notice and no Go error", a, err)
	}
	if inner.calls.Load() != 3 {
		t.Errorf("upstream calls = %d, want 3 (1 + 2 retries)", inner.calls.Load())
	}
	inner.fail.Store(false)
	if a, _ := r.Answer(context.Background(), collab.Query{Text: "x"}); a.Status != schemas.StatusOK || a.Cached {
		t.Errorf("after recovery: %+v; the failure must not have been cached", a)
	}
	s := r.Stats()
	if s.Calls != 2 || s.Failures[guard.KindHTTP5xx] != 1 || s.Retries != 2 || s.AttemptErrors[guard.KindHTTP5xx] != 3 {
		t.Errorf("stats = %+v, want 2 calls, 1 http_5xx failure, 2 retries, 3 http_5xx attempt errors", s)
	}
	// A timed-out call reports status timeout.
	slow := collab.NewResilient(collab.Knowledge, collab.Func(func(ctx context.Context, q collab.Query) (collab.Answer, error) {
		<-ctx.Done()
		return collab.Answer{}, ctx.Err()
	}), guard.New(guard.Policy{Timeout: 10 * time.Millisecond}, nil, nil), nil)
	if a, err := slow.Answer(context.Background(), collab.Query{Text: "x"}); err != nil || a.Status != schemas.StatusTimeout || a.Text != collab.NoticeTimeout {
		t.Errorf("hanging upstream: %+v, %v; want status timeout", a, err)
	}
	// The caller's own cancellation is a Go error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := slow.Answer(ctx, collab.Query{Text: "y"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: err = %v, want context.Canceled", err)
	}
}

func TestResilientSharesConcurrentIdenticalCalls(t *testing.T) {
	inner := &counting{det: true, delay: 20 * time.Millisecond}
	r := collab.NewResilient(collab.Reason, inner, guard.New(guard.Policy{}, nil, nil), collab.NewCache(10))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, err := r.Answer(context.Background(), collab.Query{Text: "1+1"}); err != nil || a.Text != "1+1!" {
				t.Errorf("answer %+v, %v", a, err)
			}
		}()
	}
	wg.Wait()
	if got := inner.calls.Load(); got != 1 {
		t.Errorf("16 concurrent identical calls made %d upstream calls, want 1", got)
	}
}

func TestCacheBounded(t *testing.T) {
	c := collab.NewCache(3)
	r := collab.NewResilient(collab.Reason, &counting{det: true}, guard.New(guard.Policy{}, nil, nil), c)
	for _, q := range []string{"a", "b", "c", "d", "e"} {
		if _, err := r.Answer(context.Background(), collab.Query{Text: q}); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 3 {
		t.Errorf("cache of 3 holds %d entries", c.Len())
	}
}

func TestNewSetBuiltinDemo(t *testing.T) {
	tc := demo.DefaultConfig()
	set, err := collab.NewSet(context.Background(), demo.Collaborators(tc, 0.2), collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	task, _ := demo.New(tc)
	e := task.Entities()[3]
	ctx := context.Background()
	noisy := 0
	for i := 0; i < 200; i++ {
		q := collab.Query{Agent: collab.Knowledge, Text: e.Name, Run: "r", Seed: collab.DeriveSeed(1, 0, "p", i, 0)}
		a, err := set.Answer(ctx, q)
		if err != nil || a.Status != schemas.StatusOK {
			t.Fatalf("knowledge: %+v, %v", a, err)
		}
		if a.Noisy {
			noisy++
		}
	}
	if noisy < 15 || noisy > 70 {
		t.Errorf("%d noisy answers of 200 at p=0.2; want about 40", noisy)
	}
	if a, _ := set.Answer(ctx, collab.Query{Agent: collab.Reason, Text: "450+3"}); a.Text != "453" {
		t.Errorf("reason 450+3 = %q", a.Text)
	}
	if a, _ := set.Answer(ctx, collab.Query{Agent: collab.Verify, Text: "450+3=453"}); a.Text != "yes" {
		t.Errorf("verify 450+3=453 = %q", a.Text)
	}
	st := set.Stats()
	if st[collab.Knowledge].Calls != 200 || st[collab.Knowledge].Noisy != int64(noisy) || st[collab.Reason].Calls != 1 {
		t.Errorf("stats = %+v", st)
	}
	m := collab.Metrics(st)
	if m["collab.knowledge.calls"] != 200 {
		t.Errorf("metrics = %v, want collab.knowledge.calls 200", m)
	}

	only := collab.Config{Reason: &collab.RoleConfig{Kind: demo.KindCollaborators}}
	s2, err := collab.NewSet(ctx, only, collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := s2.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: e.Name}); err != nil || a.Status != schemas.StatusError || a.Text != collab.NoticeNotEnabled {
		t.Errorf("unconfigured agent: %+v, %v", a, err)
	}
	if _, err := collab.NewSet(ctx, collab.Config{Verify: &collab.RoleConfig{Kind: collab.KindOpenAI, Endpoint: "http://x", Model: "m"}}, collab.Env{}); err == nil || !strings.Contains(err.Error(), "collab/kinds") {
		t.Errorf("unlinked kind: err = %v, want a hint to import collab/kinds", err)
	}
}
