package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train/rankgroup"
)

// ErrLeaderFailed is in a follower's error when rank 0's run failed.
var ErrLeaderFailed = errors.New("rank 0's run failed")

// Follow is aipo train on a rank other than 0: it learns each step rank 0
// announces, taking part in its collectives and writing nothing, until
// rank 0 says the run is done (nil) or failed (ErrLeaderFailed with rank
// 0's reason), or rank 0 is gone.
func Follow(ctx context.Context, cfg runconfig.Config, r *rankgroup.Ranks, logf func(string)) error {
	s := newLearnSession(cfg, logf)
	s.ranks = r
	defer s.Close()
	for {
		c, err := r.Next(ctx)
		if err != nil {
			return fmt.Errorf("rank %d: %w", r.Group.Rank(), err)
		}
		switch c.Op {
		case "done":
			return nil
		case "abort":
			return fmt.Errorf("rank %d: %w: %s", r.Group.Rank(), ErrLeaderFailed, c.Reason)
		case "learn":
			var err error
			switch g := s.groupConfig(); {
			case c.Zero != 0 && c.Zero != g.Zero:
				err = fmt.Errorf("rank %d: rank 0 takes its learner steps at ZeRO stage %d, this rank's configuration says learner.zero: %d: give every rank the same configuration", r.Group.Rank(), c.Zero, g.Zero)
			case c.Shards != 0 && c.Shards != g.Shards:
				err = fmt.Errorf("rank %d: rank 0 splits its mini-batches into %d virtual shards, this rank's configuration into %d (learner.deterministic: %v): give every rank the same configuration", r.Group.Rank(), c.Shards, g.Shards, cfg.Learner.Deterministic)
			case c.KeepGathered != g.KeepGathered:
				err = fmt.Errorf("rank %d: rank 0 keeps %d MiB of gathered weights between passes, this rank's configuration %d (learner.keep_gathered_mib): give every rank the same configuration", r.Group.Rank(), c.KeepGathered>>20, g.KeepGathered>>20)
			}
			if err != nil {
				// Reported to the store, so that rank 0, whose collective
				// fails when this rank leaves, names it and why.
				r.Group.ReportFailure(err)
				return err
			}
			// A step that fails here fails on rank 0 too: the same data,
			// or a collective they share. Rank 0 decides what follows (it
			// may roll the step out again and announce it anew, or abort).
			if _, err := s.Learn(ctx, c.Step); err != nil && logf != nil {
				logf(fmt.Sprintf("rank %d: %v", r.Group.Rank(), err))
			}
		default:
			return fmt.Errorf("rank %d: rank 0 sent %q, which this build does not know: are all ranks the same aipo?", r.Group.Rank(), c.Op)
		}
	}
}
