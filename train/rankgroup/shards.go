package rankgroup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// A checkpoint's weight shards are written by the ranks in parallel: every
// rank holds the whole policy after a step, so rank r writes the shards i
// with i mod N == r into the directory rank 0 is writing the checkpoint
// into, and reports each file's name, size and sha256 through the group's
// store; rank 0 writes the rest and commits. The keys are those of the
// learn command being followed (its sequence number), so a step announced
// anew after a failure starts afresh.

// shardWaitLimit bounds a wait for a rank's part of a checkpoint (rank 0's
// directory, or another rank's shards; see Ranks.await).
const shardWaitLimit = 30 * time.Minute

// shardStart is what rank 0 tells the others once the weights are being
// written: where the files go and how many shards there are, or, when it
// failed before, why it writes no checkpoint.
type shardStart struct {
	Dir    string `json:"dir,omitempty"`
	Shards int    `json:"shards,omitempty"`
	Error  string `json:"error,omitempty"`
}

// shardReport is a rank's answer: the files it wrote, or why it failed.
type shardReport struct {
	Files []rundir.File `json:"files,omitempty"`
	Error string        `json:"error,omitempty"`
}

func shardStartKey(seq int64) string {
	return "aipo/train/shards/" + strconv.FormatInt(seq, 10) + "/start"
}

func shardReportKey(seq int64, rank int) string {
	return "aipo/train/shards/" + strconv.FormatInt(seq, 10) + "/rank/" + strconv.Itoa(rank)
}

// ownsShard reports whether rank writes shard i of a group of size ranks.
func ownsShard(rank, size int) func(i, n int) bool {
	return func(i, _ int) bool { return i%size == rank }
}

// ShardSave is rank 0's side of one checkpoint's parallel shards.
type ShardSave struct {
	r       *Ranks
	seq     int64
	started bool
	shards  int
	by      []int // shards written by each rank
}

// ShardSave makes the other ranks of r write their shards of the
// checkpoint rank 0 saves for the learn command it announced last.
func (r *Ranks) ShardSave() *ShardSave {
	return &ShardSave{r: r, seq: r.seq}
}

// Helpers is the checkpoint.ShardHelpers of s.
func (s *ShardSave) Helpers() *checkpoint.ShardHelpers {
	size := s.r.Group.Size()
	return &checkpoint.ShardHelpers{
		Mine: ownsShard(0, size),
		Start: func(ctx context.Context, dir string, n int) error {
			s.started, s.shards = true, n
			s.by = make([]int, size)
			for i := 0; i < n; i++ {
				s.by[i%size]++
			}
			return s.publish(ctx, shardStart{Dir: dir, Shards: n})
		},
		Collect: s.collect,
	}
}

func (s *ShardSave) publish(ctx context.Context, m shardStart) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := s.r.Group.Store().Set(ctx, shardStartKey(s.seq), b); err != nil {
		return fmt.Errorf("telling the other ranks to write their weight shards: %w", err)
	}
	return nil
}

// collect waits for every rank that owns shards to report them.
func (s *ShardSave) collect(ctx context.Context) ([]rundir.File, error) {
	var out []rundir.File
	for q := 1; q < len(s.by); q++ {
		if s.by[q] == 0 {
			continue
		}
		b, err := s.r.await(ctx, shardReportKey(s.seq, q), q, fmt.Sprintf("rank %d's weight shards", q), shardWaitLimit)
		if err != nil {
			return nil, err
		}
		var rep shardReport
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("rank %d's report of its weight shards %q: %w", q, b, err)
		}
		if rep.Error != "" {
			return nil, fmt.Errorf("rank %d failed to write its weight shards: %s", q, rep.Error)
		}
		if len(rep.Files) != s.by[q] {
			return nil, fmt.Errorf("rank %d reported %d weight shards, it owns %d of %d", q, len(rep.Files), s.by[q], s.shards)
		}
		out = append(out, rep.Files...)
	}
	return out, nil
}

// Abandon tells the other ranks, when rank 0 failed before the weights,
// that it writes no checkpoint, so that they stop waiting at once.
func (s *ShardSave) Abandon(ctx context.Context, err error) {
	if s.started || err == nil {
		return
	}
	s.publish(ctx, shardStart{Error: err.Error()}) // best effort: they time out otherwise
}

// Summary is rank 0's line about who wrote checkpoint k's shards; empty
// when the weights were one file.
func (s *ShardSave) Summary(k int64) string {
	if !s.started {
		return ""
	}
	parts := make([]string, 0, len(s.by))
	for q, c := range s.by {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%d by rank %d", c, q))
		}
	}
	return fmt.Sprintf("checkpoint %d: %d weight shards written in parallel by %d ranks: %s", k, s.shards, len(parts), strings.Join(parts, ", "))
}

// WriteShards is a follower's part of committing the checkpoint rank 0
// saves for the learn command followed last: when the weights take more
// than one shard and this rank owns some, it waits for rank 0's directory,
// writes its shards there and reports them (or its failure) to rank 0.
func (r *Ranks) WriteShards(ctx context.Context, ck checkpoint.Checkpoint, opts checkpoint.SaveOptions) error {
	rank, size := r.Group.Rank(), r.Group.Size()
	n, err := checkpoint.WeightShards(ck, opts)
	if err != nil || n <= 1 || rank >= n {
		return err
	}
	seq := r.seq
	b, err := r.await(ctx, shardStartKey(seq), 0, "rank 0's directory to write the weight shards into", shardWaitLimit)
	if err != nil {
		return err
	}
	var st shardStart
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("rank 0's shard directory %q: %w", b, err)
	}
	if st.Error != "" {
		return fmt.Errorf("rank 0 writes no checkpoint: %s", st.Error)
	}
	var rep shardReport
	var files []rundir.File
	if st.Shards != n {
		err = fmt.Errorf("rank 0 splits the weights into %d shards, this rank into %d: are all ranks the same aipo with the same configuration?", st.Shards, n)
	} else {
		files, err = checkpoint.WriteShards(ctx, st.Dir, ck, opts, ownsShard(rank, size))
	}
	rep.Files = files
	if err != nil {
		rep.Error = err.Error()
	}
	rb, merr := json.Marshal(rep)
	if merr != nil {
		return errors.Join(err, merr)
	}
	if serr := r.Group.Store().Set(ctx, shardReportKey(seq, rank), rb); serr != nil {
		return errors.Join(err, fmt.Errorf("reporting the weight shards to rank 0: %w", serr))
	}
	return err
}
