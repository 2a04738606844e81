package trajectories

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
)

// worker holds what the sampling DoFns of one process share for one Spec:
// the policy client, the collaborators, the protocol, the prompt renderer
// and the bound on trajectories in flight.
type worker struct {
	refs     int
	client   policy.Client
	agents   collab.Set
	protocol *interact.Protocol
	render   *Renderer
	slots    chan struct{}
	// teacher writes guidance traces (Guidance.Source teacher); empty
	// otherwise.
	teacher       collab.Set
	teacherWarned atomic.Bool
}

var (
	workersMu sync.Mutex
	workers   = map[string]*worker{}
)

// acquireWorker returns the process's worker for spec, opening it on first
// use. Every acquire is paired with a releaseWorker.
func acquireWorker(ctx context.Context, spec Spec) (*worker, error) {
	key := spec.key()
	workersMu.Lock()
	defer workersMu.Unlock()
	if w, ok := workers[key]; ok {
		w.refs++
		return w, nil
	}
	w, err := openWorker(ctx, spec)
	if err != nil {
		return nil, err
	}
	w.refs = 1
	workers[key] = w
	return w, nil
}

// releaseWorker drops one reference and closes the worker with the last.
func releaseWorker(spec Spec) error {
	key := spec.key()
	workersMu.Lock()
	w, ok := workers[key]
	if !ok {
		workersMu.Unlock()
		return nil
	}
	w.refs--
	if w.refs > 0 {
		workersMu.Unlock()
		return nil
	}
	delete(workers, key)
	workersMu.Unlock()
	return w.close()
}

func openWorker(ctx context.Context, spec Spec) (*worker, error) {
	client, err := policy.Open(ctx, spec.PolicyEndpoint)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	w := &worker{client: client, agents: collab.Set{}, slots: make(chan struct{}, spec.MaxInFlight)}
	if len(spec.Collaborators.Roles()) > 0 {
		cfg := spec.Collaborators
		if spec.CollabBaseDir != "" {
			cfg = cfg.WithBaseDir(spec.CollabBaseDir)
		}
		if w.agents, err = collab.NewSet(ctx, cfg, collab.Env{}); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("rollout: %w", err)
		}
	}
	w.teacher = collab.Set{}
	if spec.Guidance.Source == guidance.SourceTeacher {
		cfg := collab.Config{Reason: spec.Guidance.TeacherRole()}
		if spec.CollabBaseDir != "" {
			cfg = cfg.WithBaseDir(spec.CollabBaseDir)
		}
		if w.teacher, err = collab.NewSet(ctx, cfg, collab.Env{}); err != nil {
			_ = w.close()
			return nil, fmt.Errorf("rollout: rollout.guidance.teacher: %w", err)
		}
	}
	if w.protocol, err = interact.New(ctx, client, w.agents, spec.Interact); err != nil {
		_ = w.close()
		return nil, fmt.Errorf("rollout: %w", err)
	}
	if w.render, err = spec.renderer(w.agents.Agents()); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

// renderer is the prompt renderer of spec for the agents.
func (spec Spec) renderer(agents []collab.Agent) (*Renderer, error) {
	if spec.ChatTemplate == "" {
		return NewRenderer(spec.SystemPrompt, spec.PromptTemplate, agents, spec.Interact)
	}
	chat, err := chattemplate.New(spec.ChatTemplateFile, spec.ChatTemplate, spec.ChatTokens)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return NewChatRenderer(spec.SystemPrompt, chat, spec.EnableThinking, agents, spec.Interact)
}

func (w *worker) close() error {
	return errors.Join(w.client.Close(), w.agents.Close(), w.teacher.Close())
}
