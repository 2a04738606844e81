// Package rankgroup is the group of learner processes of one aipo train
// (--nproc N, or any launcher that sets the torchrun variables): joining
// it, rank 0's commands to the others through the group's store, the
// bounded waits for another rank, and the checkpoint weight shards the
// ranks write in parallel.
package rankgroup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/collective/nccl"
)

// Ranks is this process's place in a group of learner processes (aipo
// train --nproc N, or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR
// and MASTER_PORT). Rank 0 leads: it holds the run's lease, rolls out,
// evaluates and syncs the policy servers as one process does, and
// announces each learner step through the group's store; every rank then
// takes part in the step (trainer.RLStepDP) and rank 0 alone writes what
// it commits.
type Ranks struct {
	Group *collective.Group
	Comm  collective.Comm
	// Device is the group's NCCL communicator, opened by the first
	// DeviceComm (nil until then).
	Device collective.Comm

	seq int64 // commands announced (rank 0) or followed (others)
}

// Join forms the group the launcher's environment describes and opens
// its Gloo communicator. A group of one rank (aipo train --nproc 1) has
// no peer to connect to: its host communicator is collective.Single,
// whose collectives are Gloo's at one rank (the buffer itself, or a
// copy), so the same binary runs it with or without cgo (a build without
// Gloo, as scripts/gpu-check.sh carries to a GPU machine); the store
// stays, for the NCCL communicator's id.
func Join(ctx context.Context, opts collective.Options) (*Ranks, error) {
	env, err := collective.EnvFromOS()
	if err != nil {
		return nil, err
	}
	g, err := collective.Join(ctx, env, opts)
	if err != nil {
		return nil, err
	}
	if g.Size() == 1 {
		return &Ranks{Group: g, Comm: collective.Single()}, nil
	}
	c, err := gloo.New(ctx, g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return &Ranks{Group: g, Comm: c}, nil
}

// Describe is the rank's one-line account of its place in the group and
// the addresses it uses: the store's, this rank's end of its connection to
// it, and its end of its Gloo pair with the next rank, e.g. "rank 1 of 2:
// store 10.0.0.1:29500 (connected from 10.0.0.2:40312), gloo 10.0.0.2:35711
// (the route to MASTER_ADDR 10.0.0.1; ...)". Rank 0 serves the store.
func (r *Ranks) Describe() string {
	g := r.Group
	served := ""
	if g.Rank() == 0 {
		served = "served here, "
	}
	s := fmt.Sprintf("rank %d of %d: store %s (%sconnected from %s)", g.Rank(), g.Size(), g.Store().Addr(), served, g.Store().LocalAddr())
	if a, ok := r.Comm.(interface{ Addr() string }); ok {
		s += ", " + r.Comm.Backend() + " " + a.Addr()
	}
	return s
}

// DeviceComm is the group's communicator of device memory: NCCL on the
// GPU numbered ordinal, opened on first use (every rank asks at the same
// point of the same step: its learner's first passes on a device). Without
// NCCL the error says what to install or set.
func (r *Ranks) DeviceComm(ctx context.Context, ordinal int) (collective.Comm, error) {
	if r.Device != nil {
		return r.Device, nil
	}
	c, err := nccl.New(ctx, r.Group, nccl.Options{Device: ordinal})
	if err != nil {
		return nil, fmt.Errorf("rank %d: the group's NCCL communicator on GPU %d, which reduces the gradients on the devices: %w", r.Group.Rank(), ordinal, err)
	}
	r.Device = c
	return c, nil
}

// Close leaves the group.
func (r *Ranks) Close() error {
	var dev error
	if r.Device != nil {
		dev = r.Device.Close()
	}
	return errors.Join(dev, r.Comm.Close(), r.Group.Close())
}

// Leader reports whether this is rank 0.
func (r *Ranks) Leader() bool { return r == nil || r.Group.Rank() == 0 }

// Command is what rank 0 tells the others.
type Command struct {
	Op     string `json:"op"` // "learn", "done" or "abort"
	Step   int64  `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Zero is rank 0's learner.zero and Shards the virtual shards of its
	// mini-batches (learner.deterministic): ranks that disagree would
	// exchange buffers of different sizes.
	Zero   int `json:"zero,omitempty"`
	Shards int `json:"shards,omitempty"`
	// KeepGathered is rank 0's learner.keep_gathered_mib in bytes: ranks
	// that disagree would skip different gathers.
	KeepGathered int64 `json:"keep_gathered,omitempty"`
}

func commandKey(seq int64) string { return "aipo/train/command/" + strconv.FormatInt(seq, 10) }

// Announce publishes rank 0's next command.
func (r *Ranks) Announce(ctx context.Context, c Command) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	r.seq++
	if err := r.Group.Store().Set(ctx, commandKey(r.seq), b); err != nil {
		return fmt.Errorf("telling the other ranks to %s: %w", c.Op, err)
	}
	return nil
}

// followPoll is how long a rank waits for another's key in the store
// before it asks the store whether that rank is still alive (await).
const followPoll = 5 * time.Second

// Next waits for rank 0's next command. Rank 0 may spend hours between
// learner steps (rollouts, evaluations), so the wait has no overall bound;
// await fails it naming rank 0 when rank 0 is gone, failed or stopped
// answering, or the store it serves no longer answers.
func (r *Ranks) Next(ctx context.Context) (Command, error) {
	b, err := r.await(ctx, commandKey(r.seq+1), 0, "rank 0's next learner step", 0)
	if err != nil {
		return Command{}, err
	}
	r.seq++
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("rank 0's command %d %q: %w", r.seq, b, err)
	}
	return c, nil
}

// await waits for key, which rank peer sets once it has done what (a noun
// phrase: "rank 1's weight shards"), at most limit (0: as long as peer
// lives). It is made of bounded waits of followPoll, between which it
// asks the store about peer, and fails naming peer when peer is gone,
// reported a failure, or its heartbeat is older than the group's
// StaleAfter, or when the store no longer answers.
func (r *Ranks) await(ctx context.Context, key string, peer int, what string, limit time.Duration) ([]byte, error) {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	unreachable := func(err error) error {
		return fmt.Errorf("waiting for %s: the group's store at %s, which rank 0 serves, does not answer (%v)", what, r.Group.Env().StoreAddr(), err)
	}
	for {
		poll := followPoll
		if limit > 0 {
			poll = min(poll, max(time.Until(deadline), time.Millisecond))
		}
		wctx, cancel := context.WithTimeout(ctx, poll)
		b, err := r.Group.Store().Get(wctx, key)
		cancel()
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, collective.ErrTimeout) {
			return nil, unreachable(err)
		}
		if limit > 0 && time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not come within %s", what, limit)
		}
		states, err := r.Group.Health()
		if err != nil {
			return nil, unreachable(err)
		}
		for _, p := range states {
			if p.Rank != peer {
				continue
			}
			switch {
			case p.Gone:
				return nil, fmt.Errorf("rank %d is gone (its connection to the store closed %s ago) while this rank waited for %s", peer, p.GoneFor.Round(time.Millisecond), what)
			case p.Failed != "":
				return nil, fmt.Errorf("rank %d failed while this rank waited for %s: %s", peer, what, p.Failed)
			case p.SinceBeat > r.Group.Options().StaleAfter:
				return nil, fmt.Errorf("rank %d stopped answering (last heartbeat %s ago, more than the group's %s) while this rank waited for %s", peer, p.SinceBeat.Round(time.Millisecond), r.Group.Options().StaleAfter, what)
			}
		}
	}
}

// Finish tells the other ranks that rank 0's run ended: done when err is
// nil, else aborted with err's text, which each of them then reports.
func (r *Ranks) Finish(ctx context.Context, runErr error) error {
	if r == nil || !r.Leader() {
		return nil
	}
	c := Command{Op: "done"}
	if runErr != nil {
		c = Command{Op: "abort", Reason: runErr.Error()}
	}
	return r.Announce(ctx, c)
}
