package collab

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/schemas"
)

// Agent names a collaborator role.
type Agent string

// The three agents of the AIPO rollout protocol.
const (
	Verify    Agent = "verify"    // checks a claimed fact or equation: <verify>...</verify>
	Knowledge Agent = "knowledge" // returns knowledge, sometimes deliberately noisy: <retrieval>...</retrieval>
	Reason    Agent = "reason"    // solves a sub-task: <reason>...</reason>
)

// Agents lists the agents in a fixed order.
var Agents = []Agent{Verify, Knowledge, Reason}

// Valid reports whether a is one of Agents.
func (a Agent) Valid() bool { return a == Verify || a == Knowledge || a == Reason }

// ParseAgent returns the agent named s.
func ParseAgent(s string) (Agent, error) {
	a := Agent(strings.TrimSpace(s))
	if !a.Valid() {
		return "", fmt.Errorf("collab: unknown agent %q (want verify, knowledge or reason)", s)
	}
	return a, nil
}

// Source is the schemas token source of the agent's tokens.
func (a Agent) Source() int8 {
	switch a {
	case Verify:
		return schemas.SourceVerify
	case Knowledge:
		return schemas.SourceKnowledge
	case Reason:
		return schemas.SourceReason
	}
	return schemas.SourceTemplate
}

// Query is one call of a policy to an agent.
type Query struct {
	Agent Agent
	Text  string // what the policy wrote inside the agent's tag
	// Problem is the prompt's problem and Context the policy's text before
	// the call (earlier agents' answers included): the interaction
	// context, sent as the role's context setting says (RoleConfig.Context).
	Problem  string
	Context  string
	Run      string // run identifier (cache scope)
	Step     int64  // training step (drives the Knowledge Agent's noise curriculum)
	PromptID string
	Sample   int    // index within the prompt's group
	Call     int    // index of the interaction within the trajectory
	Seed     uint64 // from DeriveSeed: the only source of the collaborator's randomness
}

// Answer is an agent's reply.
type Answer struct {
	Text string
	// Noisy is set when the Knowledge Agent deliberately answered with noise.
	Noisy bool
	// Status is schemas.StatusOK, StatusError or StatusTimeout.
	Status string
	// Latency is the time the call took, retries and waits included.
	Latency time.Duration
	// Cached is set when the answer came from the per-run cache.
	Cached bool
}

// Notices answer calls that failed for good.
const (
	NoticeError      = "agent unavailable"
	NoticeTimeout    = "agent timed out"
	NoticeNotEnabled = "agent not available in this run"
)

// Collaborator answers queries. Implementations are safe for concurrent use.
// An implementation returns an error for a failed call; the Resilient
// wrapper classifies it (see package guard) and retries when it is worth it.
type Collaborator interface {
	Answer(ctx context.Context, q Query) (Answer, error)
}

// Deterministic is implemented by collaborators that can say whether their
// answer depends on the query text alone (not on the seed or step). It
// widens the cache (see the package doc).
type Deterministic interface {
	Deterministic() bool
}

// Func adapts a function to Collaborator.
type Func func(ctx context.Context, q Query) (Answer, error)

// Answer calls f.
func (f Func) Answer(ctx context.Context, q Query) (Answer, error) { return f(ctx, q) }

// Set holds one collaborator per configured agent.
type Set map[Agent]Collaborator

// Answer routes q to its agent. An agent that is not configured answers
// with NoticeNotEnabled and status error (the trajectory goes on). The
// error is non-nil only when ctx ended.
func (s Set) Answer(ctx context.Context, q Query) (Answer, error) {
	c, ok := s[q.Agent]
	if !ok {
		return Answer{Text: NoticeNotEnabled, Status: schemas.StatusError}, ctx.Err()
	}
	return c.Answer(ctx, q)
}

// Agents lists the configured agents, sorted.
func (s Set) Agents() []Agent {
	out := make([]Agent, 0, len(s))
	for a := range s {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Stats snapshots the counters of every agent whose collaborator keeps them
// (those built by NewSet do).
func (s Set) Stats() map[Agent]Stats {
	out := map[Agent]Stats{}
	for a, c := range s {
		if st, ok := c.(interface{ Stats() Stats }); ok {
			out[a] = st.Stats()
		}
	}
	return out
}

// Close closes every collaborator that holds resources (connections) and
// returns the first error.
func (s Set) Close() error {
	var first error
	for _, a := range s.Agents() {
		if cl, ok := s[a].(interface{ Close() error }); ok {
			if err := cl.Close(); err != nil && first == nil {
				first = fmt.Errorf("collab: closing %s: %w", a, err)
			}
		}
	}
	return first
}
