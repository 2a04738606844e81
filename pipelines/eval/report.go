package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/metrics"
)

// Report file names under the output directory.
const (
	ReportJSON     = "report.json"
	ReportMarkdown = "report.md"
	ReportPNG      = "report.png"
)

// Report is the scores of one policy on a run's benchmarks.
type Report struct {
	Label     string    `json:"label"`
	Run       string    `json:"run"`
	PolicyURI string    `json:"policy_uri"`
	Created   time.Time `json:"created"`
	// Complete is false while chunks remain (a run stopped by max_chunks
	// or killed); the scores then cover the committed problems only.
	Complete bool `json:"complete"`
	// PolicyVersions lists the versions that produced the records.
	PolicyVersions []int64             `json:"policy_versions"`
	Sampling       evalconfig.Sampling `json:"sampling"`
	Benchmarks     []BenchmarkScore    `json:"benchmarks"`
	// Overall is the macro average over benchmarks (equal weight each).
	Overall Overall `json:"overall"`
}

// BenchmarkScore is one benchmark's scores.
type BenchmarkScore struct {
	Name     string `json:"name"`
	Verifier string `json:"verifier"`
	Code     bool   `json:"code"`
	// Problems is the benchmark's size; Scored is how many problems have
	// committed records.
	Problems int `json:"problems"`
	Scored   int `json:"scored"`
	metrics.Score
	// Greedy is the accuracy of the problems' greedy responses
	// (sampling.greedy), with its standard error over problems; nil
	// without them.
	Greedy *metrics.Estimate `json:"greedy,omitempty"`
	// CallRate is the share of the samples that call a collaborator (write
	// an agent's opening tag, transforms/interact's Tags): a policy
	// evaluated alone gets no answer, so it is what the policy would ask
	// for. GreedyCallRate is that of the greedy responses.
	CallRate       float64 `json:"call_rate,omitempty"`
	GreedyCallRate float64 `json:"greedy_call_rate,omitempty"`
	// Truncated is the share of responses cut at the token limit.
	Truncated float64 `json:"truncated"`
	// MeanResponseTokens is the mean response length.
	MeanResponseTokens float64 `json:"mean_response_tokens"`
	// Subsets break the benchmark down by a field (MATH500 by subject and
	// level).
	Subsets []SubsetScore `json:"subsets,omitempty"`
}

// SubsetScore is the score of the problems whose Field has Value.
type SubsetScore struct {
	Field string `json:"field"`
	Value string `json:"value"`
	metrics.Score
}

// Overall is the macro average over benchmarks.
type Overall struct {
	Avg   metrics.Estimate `json:"avg"`
	Pass1 metrics.Estimate `json:"pass1"`
}

// buildReport reads every committed chunk of the plan and scores it.
func buildReport(ctx context.Context, cfg evalconfig.Config, plan *Plan) (*Report, error) {
	rep := &Report{Label: cfg.Policy.Label, Run: cfg.Run, PolicyURI: secure.RedactURI(cfg.Policy.URI), Created: time.Now().UTC(),
		Complete: true, Sampling: cfg.Sampling}
	versions := map[int64]bool{}
	var avgs, pass1s []metrics.Estimate
	for _, pb := range plan.Benchmarks {
		var recs []schemas.EvalRecord
		for _, dir := range pb.dirs {
			rows, _, err := schemas.ReadStep[schemas.EvalRecord](ctx, dir)
			if err != nil {
				if strings.Contains(err.Error(), schemas.ErrNoManifest.Error()) {
					rep.Complete = false
					continue
				}
				return nil, fmt.Errorf("eval report: %w", err)
			}
			recs = append(recs, rows...)
		}
		for _, r := range recs {
			versions[r.PolicyVersion] = true
		}
		bs := scoreBenchmark(pb, recs, cfg.PassK, cfg.MajK)
		rep.Benchmarks = append(rep.Benchmarks, bs)
		if bs.Scored > 0 {
			avgs = append(avgs, bs.Avg)
			if e, ok := metrics.Find(bs.Pass, 1); ok {
				pass1s = append(pass1s, e)
			}
		}
	}
	rep.Overall = Overall{Avg: metrics.Macro(avgs), Pass1: metrics.Macro(pass1s)}
	for v := range versions {
		rep.PolicyVersions = append(rep.PolicyVersions, v)
	}
	sort.Slice(rep.PolicyVersions, func(i, j int) bool { return rep.PolicyVersions[i] < rep.PolicyVersions[j] })
	return rep, nil
}

// scoreBenchmark computes a benchmark's scores and breakdowns from its
// records: the samples' (Avg@n, Pass@k, maj@k, truncation, length, call
// rate) and, apart, the greedy responses'.
func scoreBenchmark(pb PlannedBenchmark, recs []schemas.EvalRecord, passK, majK []int) BenchmarkScore {
	code := pb.resolved.Code()
	samples := make([]metrics.Sample, 0, len(recs))
	var greedy []float64
	var truncated, tokens, calls, greedyCalls float64
	for _, r := range recs {
		call := callsCollaborator(r.Response)
		if r.SampleIndex == GreedySample {
			greedy = append(greedy, b2f(r.Correct))
			greedyCalls += b2f(call)
			continue
		}
		s := metrics.Sample{Problem: r.ProblemID, Correct: r.Correct}
		if !code {
			s.Answer = r.Extracted
		}
		samples = append(samples, s)
		if r.FinishReason == sampling.FinishLength {
			truncated++
		}
		tokens += float64(r.ResponseLen)
		calls += b2f(call)
	}
	if code {
		majK = nil
	}
	sc := metrics.Summarize(samples, passK, majK)
	bs := BenchmarkScore{Name: pb.Name, Verifier: pb.Verifier, Code: code, Problems: pb.Problems, Scored: sc.Problems, Score: sc}
	if n := float64(len(samples)); n > 0 {
		bs.Truncated = truncated / n
		bs.MeanResponseTokens = tokens / n
		bs.CallRate = calls / n
	}
	if len(greedy) > 0 {
		g := metrics.Mean(greedy)
		bs.Greedy = &g
		bs.GreedyCallRate = greedyCalls / float64(len(greedy))
		bs.Scored = max(bs.Scored, len(greedy))
	}
	if len(pb.Breakdown) == 0 {
		return bs
	}
	// Subset membership comes from the problems' extra fields.
	fields := map[string]map[string]string{} // problem id -> field -> value
	for _, p := range pb.prompts {
		extra, err := extraOf(p)
		if err != nil {
			continue
		}
		m := map[string]string{}
		for _, f := range pb.Breakdown {
			if v := stringField(extra, f); v != "" {
				m[f] = v
			}
		}
		fields[p.ID] = m
	}
	for _, f := range pb.Breakdown {
		groups := map[string][]metrics.Sample{}
		for _, s := range samples {
			if v, ok := fields[s.Problem][f]; ok {
				groups[v] = append(groups[v], s)
			}
		}
		vals := make([]string, 0, len(groups))
		for v := range groups {
			vals = append(vals, v)
		}
		sort.Strings(vals)
		for _, v := range vals {
			bs.Subsets = append(bs.Subsets, SubsetScore{Field: f, Value: v, Score: metrics.Summarize(groups[v], passK, majK)})
		}
	}
	return bs
}

// callsCollaborator reports whether a response calls a collaborator: it
// writes one of the agents' opening tags.
func callsCollaborator(response string) bool {
	for _, t := range interact.Tags {
		if strings.Contains(response, t.Open) {
			return true
		}
	}
	return false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Write writes report.json, report.md and report.png into dir.
func (r *Report) Write(ctx context.Context, dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := storage.WriteAtomic(ctx, storage.Join(dir, ReportJSON), append(b, '\n')); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	if err := storage.WriteAtomic(ctx, storage.Join(dir, ReportMarkdown), []byte(r.Markdown())); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	png, err := Chart([]*Report{r})
	if err != nil {
		return err
	}
	if err := storage.WriteAtomic(ctx, storage.Join(dir, ReportPNG), png); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	return nil
}

// ReadReport reads a report.json (local or gs://).
func ReadReport(ctx context.Context, path string) (*Report, error) {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("eval report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("eval report %s: not a report.json: %w", path, err)
	}
	if r.Label == "" && len(r.Benchmarks) == 0 {
		return nil, fmt.Errorf("eval report %s: no label and no benchmarks; is it a report.json written by aipo eval?", path)
	}
	return &r, nil
}

// Bench returns the named benchmark's score.
func (r *Report) Bench(name string) (BenchmarkScore, bool) {
	for _, b := range r.Benchmarks {
		if b.Name == name {
			return b, true
		}
	}
	return BenchmarkScore{}, false
}
