package eval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/sandbox"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	beamrow.Register[chunk]()
	register.DoFn2x1[context.Context, chunk, error](&evalChunkFn{})
}

// chunk is one unit of work and of commit: up to ChunkSize problems of one
// benchmark, all their samples.
type chunk struct {
	Benchmark string
	Index     int
	Dir       string
	Prompts   []schemas.Prompt
}

// benchSpec is what a worker needs to know about a benchmark.
type benchSpec struct {
	Name        string `json:"name"`
	Verifier    string `json:"verifier"`
	Template    string `json:"template"`
	Samples     int    `json:"samples"`
	MaxTokens   int    `json:"max_tokens"`
	Fingerprint string `json:"fingerprint"`
}

// GreedySample is the sample index of a problem's greedy response
// (sampling.greedy) in its records; its samples are 0..n-1.
const GreedySample = -1

// Manifest meta keys of a committed chunk.
const (
	metaBenchmark   = "benchmark"
	metaFingerprint = "fingerprint"
	metaProblems    = "problems"
	metaChunk       = "chunk"
)

// RecordsDir is the directory of a benchmark's chunks under out.
func RecordsDir(out, benchmark string) string { return storage.Join(out, "records", benchmark) }

// ChunkDir is the committed step of chunk i of a benchmark.
func ChunkDir(out, benchmark string, i int) string {
	return storage.Join(RecordsDir(out, benchmark), fmt.Sprintf("chunk-%06d", i))
}

// fingerprint identifies everything that decides a benchmark's records, so
// that a resumed run never mixes records of different settings.
func fingerprint(c evalconfig.Config, r evalconfig.Resolved) string {
	v := struct {
		URI       string
		Chat      evalconfig.Chat
		Sampling  evalconfig.Sampling
		Source    any
		Verifier  string
		Template  string
		Samples   int
		MaxTokens int
		Limit     int
		ChunkSize int
	}{c.Policy.URI, c.Chat, c.Sampling, r.Source, r.Verifier, templateText(r.Template), r.Samples, r.MaxTokens, r.Limit, c.ChunkSize}
	v.Sampling.Samples = 0 // r.Samples holds the effective value
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

func templateText(t string) string {
	if s, ok := evalconfig.Templates[t]; ok {
		return s
	}
	return t
}

// evalChunkFn samples, scores and commits one chunk.
type evalChunkFn struct {
	Cfg     evalconfig.Config    `json:"cfg"`
	Benches map[string]benchSpec `json:"benches"`
	// Tokenizer is the resolved chat tokenizer path ("" for the raw template).
	Tokenizer string `json:"tokenizer"`

	client    policy.Client
	info      policy.Info
	enc       *chatEncoder
	sb        *sandbox.Sandbox
	scorers   map[string]*scorer
	templates map[string]*template.Template
}

// Setup opens the policy, the tokenizer and, for code benchmarks, the
// sandbox.
func (fn *evalChunkFn) Setup(ctx context.Context) error {
	c, err := policy.Open(ctx, fn.Cfg.Policy.URI)
	if err != nil {
		return fmt.Errorf("eval: open policy: %w", err)
	}
	fn.client = c
	if fn.info, err = c.Info(ctx); err != nil {
		return fmt.Errorf("eval: policy %s: info: %w", secure.RedactURI(fn.Cfg.Policy.URI), err)
	}
	var tok *tokenizer.HF
	if fn.Tokenizer != "" {
		if tok, err = tokenizer.Load(fn.Tokenizer); err != nil {
			return fmt.Errorf("eval: chat tokenizer: %w", err)
		}
	}
	if fn.enc, err = newChatEncoder(fn.Cfg.Chat, c, tok); err != nil {
		return err
	}
	fn.scorers = map[string]*scorer{}
	fn.templates = map[string]*template.Template{}
	for name, b := range fn.Benches {
		if (b.Verifier == evalconfig.VerifierMBPP || b.Verifier == evalconfig.VerifierHumanEval) && fn.sb == nil {
			if fn.sb, err = sandbox.New(fn.Cfg.Sandbox); err != nil {
				return fmt.Errorf("eval: %w", err)
			}
		}
		var sbx *sandbox.Sandbox
		if b.Verifier == evalconfig.VerifierMBPP || b.Verifier == evalconfig.VerifierHumanEval {
			sbx = fn.sb
		}
		if fn.scorers[name], err = newScorer(b.Verifier, sbx); err != nil {
			return fmt.Errorf("eval: benchmark %s: %w", name, err)
		}
		if fn.templates[name], err = evalconfig.ParseTemplate(b.Template); err != nil {
			return fmt.Errorf("eval: benchmark %s: %w", name, err)
		}
	}
	return nil
}

// Teardown closes the policy client.
func (fn *evalChunkFn) Teardown() error {
	if fn.client != nil {
		return fn.client.Close()
	}
	return nil
}

// sampleSeed is the seed of one sample: a function of the base seed, the
// problem and the sample index only, so a resumed run draws the same.
func sampleSeed(base int64, problem string, sample int) int64 {
	h := fnv.New64a()
	h.Write([]byte(problem))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(sample)))
	return int64(h.Sum64()>>2) ^ base
}

// ProcessElement evaluates a chunk and commits its records.
func (fn *evalChunkFn) ProcessElement(ctx context.Context, c chunk) error {
	b, ok := fn.Benches[c.Benchmark]
	if !ok {
		return fmt.Errorf("eval: chunk of unknown benchmark %q", c.Benchmark)
	}
	tm, sc := fn.templates[c.Benchmark], fn.scorers[c.Benchmark]
	type job struct{ p, s int }
	// Each problem has b.Samples samples (indices 0..n-1) and, with
	// sampling.greedy, its greedy response first (index -1).
	first := 0
	if fn.Cfg.Sampling.Greedy {
		first = GreedySample
	}
	per := b.Samples - first
	rows := make([]schemas.EvalRecord, len(c.Prompts)*per)
	prefixes := make([][]int32, len(c.Prompts))
	users := make([]string, len(c.Prompts))
	for i, p := range c.Prompts {
		u, err := renderUser(tm, p)
		if err != nil {
			return fmt.Errorf("eval %s: %w", c.Benchmark, err)
		}
		users[i] = u
		if prefixes[i], err = fn.enc.encode(ctx, u); err != nil {
			return fmt.Errorf("eval %s problem %s: encode prompt: %w", c.Benchmark, p.ID, err)
		}
	}
	stops := append(append([]int32(nil), fn.info.EOS...), fn.enc.stopIDs()...)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	for range max(1, min(fn.Cfg.Concurrency, len(rows))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				rec, err := fn.sample(ctx, c.Benchmark, b, sc, c.Prompts[j.p], users[j.p], prefixes[j.p], j.s, stops)
				if err != nil {
					fail(err)
					continue
				}
				rows[j.p*per+j.s-first] = rec
			}
		}()
	}
feed:
	for i := range c.Prompts {
		for s := first; s < b.Samples; s++ {
			select {
			case jobs <- job{i, s}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return commitChunk(ctx, c, fn.Cfg.Run, b, rows)
}

// sample generates, scores and records one response: sample s of the
// problem, its greedy response when s is GreedySample.
func (fn *evalChunkFn) sample(ctx context.Context, bench string, b benchSpec, sc *scorer, p schemas.Prompt, user string, prefix []int32, s int, stops []int32) (schemas.EvalRecord, error) {
	seed := sampleSeed(fn.Cfg.Sampling.Seed, p.ID, s)
	params := fn.Cfg.Sampling.Params
	params.MaxTokens, params.Seed, params.StopTokenIDs = b.MaxTokens, seed, stops
	if s == GreedySample {
		params.Temperature = 0
	}
	if fn.info.MaxContext > 0 && len(prefix)+params.MaxTokens > fn.info.MaxContext {
		params.MaxTokens = fn.info.MaxContext - len(prefix)
		if params.MaxTokens < 1 {
			return schemas.EvalRecord{}, fmt.Errorf("eval %s problem %s: the prompt has %d tokens, the policy's context %d; raise the context or shorten the template", bench, p.ID, len(prefix), fn.info.MaxContext)
		}
	}
	var (
		res     policy.Result
		err     error
		latency time.Duration
	)
	for attempt := 0; ; attempt++ {
		start := time.Now()
		res, err = fn.client.Generate(ctx, policy.Request{Prefix: prefix, Params: params})
		latency = time.Since(start)
		if err == nil || attempt >= fn.Cfg.Retries || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(200*(attempt+1)) * time.Millisecond)
	}
	if err != nil {
		return schemas.EvalRecord{}, fmt.Errorf("eval %s problem %s sample %d: generate: %w", bench, p.ID, s, err)
	}
	toks := res.Tokens
	if n := len(toks); n > 0 && res.FinishReason != sampling.FinishLength && isStop(toks[n-1], stops) {
		toks = toks[:n-1]
	}
	text, err := fn.client.Detokenize(ctx, toks)
	if err != nil {
		return schemas.EvalRecord{}, fmt.Errorf("eval %s problem %s: detokenize: %w", bench, p.ID, err)
	}
	v, err := sc.score(ctx, p, text)
	if err != nil {
		return schemas.EvalRecord{}, fmt.Errorf("eval %s: score: %w", bench, err)
	}
	return schemas.EvalRecord{
		SchemaVersion: schemas.SchemaVersion,
		Run:           fn.Cfg.Run,
		Checkpoint:    fn.Cfg.Policy.Label,
		PolicyVersion: res.PolicyVersion,
		Benchmark:     bench,
		ProblemID:     p.ID,
		SampleIndex:   int32(s),
		Seed:          seed,
		Prompt:        user,
		Response:      text,
		Extracted:     v.Extracted,
		Answer:        p.Answer,
		Correct:       v.Correct,
		Score:         v.Score,
		Verdict:       v.Reason,
		FinishReason:  res.FinishReason,
		ResponseLen:   int32(len(res.Tokens)),
		LatencyMs:     float32(latency.Seconds() * 1000),
	}, nil
}

func isStop(t int32, stops []int32) bool {
	for _, s := range stops {
		if s == t {
			return true
		}
	}
	return false
}

// commitChunk writes the chunk's rows as one content-named shard and
// commits the chunk's manifest; files a killed attempt left in shards/ are
// removed afterwards.
func commitChunk(ctx context.Context, c chunk, run string, b benchSpec, rows []schemas.EvalRecord) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := storage.Join(c.Dir, rundir.ShardsName, ".tmp-"+storage.TempOwner()+"-"+hex.EncodeToString(rnd[:])+".parquet")
	f, err := schemas.WriteShard(ctx, tmp, rows)
	if err != nil {
		return fmt.Errorf("eval %s chunk %d: %w", c.Benchmark, c.Index, err)
	}
	name := parquetio.ContentName(f.SHA256)
	if err := storage.Rename(ctx, tmp, storage.Join(c.Dir, rundir.ShardsName, name)); err != nil {
		return fmt.Errorf("eval %s chunk %d: %w", c.Benchmark, c.Index, err)
	}
	f.Path = rundir.ShardsName + "/" + name
	m := schemas.Manifest{Kind: "eval", Run: run, Step: int64(c.Index), Files: []schemas.ManifestFile{f},
		Meta: map[string]string{metaBenchmark: c.Benchmark, metaFingerprint: b.Fingerprint,
			metaProblems: strconv.Itoa(len(c.Prompts)), metaChunk: strconv.Itoa(c.Index)}}
	if len(rows) > 0 {
		m.PolicyVersion = rows[0].PolicyVersion
	}
	if err := schemas.CommitManifest(ctx, c.Dir, m); err != nil {
		return fmt.Errorf("eval %s chunk %d: %w", c.Benchmark, c.Index, err)
	}
	found, err := storage.List(ctx, storage.Join(c.Dir, rundir.ShardsName, "*"))
	if err == nil {
		for _, p := range found {
			if storage.Base(p) != name {
				_ = storage.Remove(ctx, p)
			}
		}
	}
	return nil
}

// Plan is what a run found and will do.
type Plan struct {
	Benchmarks []PlannedBenchmark `json:"benchmarks"`
	// Todo are the chunks this run evaluates (after MaxChunks).
	Todo int `json:"todo"`
	// Committed are the chunks found committed.
	Committed int `json:"committed"`
	// Left are the chunks left for a later run by MaxChunks.
	Left int `json:"left"`
}

// PlannedBenchmark is one benchmark of a plan.
type PlannedBenchmark struct {
	Name        string   `json:"name"`
	Path        string   `json:"path"`
	Verifier    string   `json:"verifier"`
	Problems    int      `json:"problems"`
	Dead        int      `json:"dead"`
	Samples     int      `json:"samples"`
	Chunks      int      `json:"chunks"`
	Fingerprint string   `json:"fingerprint"`
	Breakdown   []string `json:"breakdown,omitempty"`

	resolved evalconfig.Resolved
	prompts  []schemas.Prompt
	dirs     []string
}

// load reads a benchmark's problems (the first Limit of them) and the rows
// that could not be read.
func load(ctx context.Context, r evalconfig.Resolved) ([]schemas.Prompt, []promptfile.DeadLetter, error) {
	good, dead, _, err := promptfile.ReadAll(ctx, r.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("benchmark %s: %w", r.Name, err)
	}
	if r.Limit > 0 && len(good) > r.Limit {
		good = good[:r.Limit]
	}
	if len(good) == 0 {
		return nil, dead, fmt.Errorf("benchmark %s: no problems in %s (%d rows dead-lettered)", r.Name, r.Source.Path, len(dead))
	}
	return good, dead, nil
}

// prepare resolves the config, loads the benchmarks and finds the chunks
// still to do.
func prepare(ctx context.Context, cfg evalconfig.Config) (evalconfig.Config, *Plan, []chunk, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, nil, nil, err
	}
	plan := &Plan{}
	var todo []chunk
	for _, bc := range cfg.Benchmarks {
		r, err := cfg.Resolve(bc)
		if err != nil {
			return cfg, nil, nil, err
		}
		ps, dead, err := load(ctx, r)
		if err != nil {
			return cfg, nil, nil, err
		}
		for i, d := range dead {
			if i < 3 {
				log.Printf("eval: benchmark %s: skipping a row: %s", r.Name, d)
			}
		}
		pb := PlannedBenchmark{Name: r.Name, Path: r.Source.Path, Verifier: r.Verifier, Problems: len(ps), Dead: len(dead),
			Samples: r.Samples, Fingerprint: fingerprint(cfg, r), Breakdown: r.Breakdown, resolved: r, prompts: ps}
		for i, start := 0, 0; start < len(ps); i, start = i+1, start+cfg.ChunkSize {
			dir := ChunkDir(cfg.Out, r.Name, i)
			pb.dirs = append(pb.dirs, dir)
			m, err := schemas.ReadManifest(ctx, dir)
			switch {
			case err == nil:
				if fp := m.Meta[metaFingerprint]; fp != pb.Fingerprint {
					return cfg, nil, nil, fmt.Errorf("eval: %s was committed with other settings (fingerprint %s, this config %s): "+
						"the policy, sampling, template, chat format, file or chunk size changed; write to another out directory or remove %s",
						dir, fp, pb.Fingerprint, RecordsDir(cfg.Out, r.Name))
				}
				plan.Committed++
			case errors.Is(err, schemas.ErrNoManifest):
				end := min(start+cfg.ChunkSize, len(ps))
				todo = append(todo, chunk{Benchmark: r.Name, Index: i, Dir: dir, Prompts: ps[start:end]})
			default:
				return cfg, nil, nil, fmt.Errorf("eval: %w", err)
			}
		}
		pb.Chunks = len(pb.dirs)
		plan.Benchmarks = append(plan.Benchmarks, pb)
	}
	if cfg.MaxChunks > 0 && len(todo) > cfg.MaxChunks {
		plan.Left = len(todo) - cfg.MaxChunks
		todo = todo[:cfg.MaxChunks]
	}
	plan.Todo = len(todo)
	return cfg, plan, todo, nil
}

// chatTokenizer resolves the chat tokenizer path: the configured one, else
// the checkpoint directory of an inproc:///path URI when it holds a
// tokenizer.json, else "" (the raw template).
func chatTokenizer(cfg evalconfig.Config) string {
	if cfg.Chat.Raw {
		return ""
	}
	if cfg.Chat.Tokenizer != "" {
		return cfg.Chat.Tokenizer
	}
	if rest, ok := strings.CutPrefix(cfg.Policy.URI, "inproc://"); ok && strings.HasPrefix(rest, "/") {
		dir, query, _ := strings.Cut(rest, "?")
		if q, err := url.ParseQuery(query); err == nil && q.Get("tokenizer") != "" {
			return q.Get("tokenizer") // the engine's own tokenizer override
		}
		if ok, _ := storage.Exists(context.Background(), storage.Join(dir, "tokenizer.json")); ok {
			return dir
		}
	}
	return ""
}

// newChunkFn is the DoFn that evaluates the chunks of plan.
func newChunkFn(cfg evalconfig.Config, plan *Plan) *evalChunkFn {
	fn := &evalChunkFn{Cfg: cfg, Benches: map[string]benchSpec{}, Tokenizer: chatTokenizer(cfg)}
	for _, b := range plan.Benchmarks {
		r := b.resolved
		fn.Benches[b.Name] = benchSpec{Name: b.Name, Verifier: r.Verifier, Template: r.Template, Samples: r.Samples,
			MaxTokens: r.MaxTokens, Fingerprint: b.Fingerprint}
	}
	return fn
}

// Build adds the evaluation of the chunks to a pipeline.
func Build(s beam.Scope, cfg evalconfig.Config, plan *Plan, todo []chunk) {
	s = s.Scope("eval")
	fn := newChunkFn(cfg, plan)
	elems := make([]any, len(todo))
	for i, c := range todo {
		elems[i] = c
	}
	chunks := beam.Reshuffle(s, beam.Create(s, elems...))
	beam.ParDo0(s, fn, chunks)
}

// An Option changes how Run reports what it does.
type Option func(*runOptions)

type runOptions struct {
	notice func(format string, args ...any)
}

// Notices sends Run's notices (the chunks it will evaluate) to f instead
// of the log package; nil drops them, for a caller that reports the
// evaluation its own way (aipo train's progress line).
func Notices(f func(format string, args ...any)) Option {
	return func(o *runOptions) {
		if f == nil {
			f = func(string, ...any) {}
		}
		o.notice = f
	}
}

// Run evaluates the chunks not yet committed on the runner named by Beam's
// --runner flag (prism by default), then computes the report from every
// committed chunk and writes it to cfg.Out. With chunks left (MaxChunks),
// the report says it is incomplete.
//
// Run says how many chunks it will evaluate through the log package
// unless an option says otherwise (Notices).
func Run(ctx context.Context, cfg evalconfig.Config, opts ...Option) (*Report, *Plan, error) {
	o := runOptions{notice: log.Printf}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, plan, todo, err := prepare(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	o.notice("eval: %d chunks to evaluate, %d already committed, %d left for a later run", plan.Todo, plan.Committed, plan.Left)
	if len(todo) > 0 {
		p, s := beam.NewPipelineWithRoot()
		Build(s, cfg, plan, todo)
		if err := beamrun.Run(ctx, p); err != nil {
			return nil, plan, fmt.Errorf("eval pipeline: %w (committed chunks are kept; rerun to continue)", err)
		}
	}
	rep, err := buildReport(ctx, cfg, plan)
	if err != nil {
		return nil, plan, err
	}
	if err := rep.Write(ctx, cfg.Out); err != nil {
		return rep, plan, err
	}
	return rep, plan, nil
}

// ReportOnly recomputes and writes the report from the chunks already
// committed under cfg.Out, evaluating nothing.
func ReportOnly(ctx context.Context, cfg evalconfig.Config) (*Report, *Plan, error) {
	cfg, plan, _, err := prepare(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	rep, err := buildReport(ctx, cfg, plan)
	if err != nil {
		return nil, plan, err
	}
	return rep, plan, rep.Write(ctx, cfg.Out)
}
