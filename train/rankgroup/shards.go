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
// into, and, in a full checkpoint, its own part of the optimiser state
// (the moments it owns, which no other rank holds); it reports each file's
// name, size and sha256 through the group's store; rank 0 writes the rest
// and commits. The keys are those of the
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
	// Exists says that the checkpoint was committed already (a step
	// redone after a restart): there is nothing to write.
	Exists bool `json:"exists,omitempty"`
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

// ShardSave is rank 0's side of one checkpoint's parallel files.
type ShardSave struct {
	r       *Ranks
	seq     int64
	parts   bool // every rank writes its part of the optimiser state
	started bool
	told    bool // the others were told that there is nothing to write
	shards  int
	by      []int // weight shards written by each rank
}

// ShardSave makes the other ranks of r write their files of the checkpoint
// rank 0 saves for the learn command it announced last: their weight
// shards and, when parts is set (a full checkpoint), their parts of the
// optimiser state.
func (r *Ranks) ShardSave(parts bool) *ShardSave {
	return &ShardSave{r: r, seq: r.seq, parts: parts}
}

// Helpers is the checkpoint.ShardHelpers of s.
func (s *ShardSave) Helpers() *checkpoint.ShardHelpers {
	size := s.r.Group.Size()
	return &checkpoint.ShardHelpers{
		Mine: ownsShard(0, size),
		Start: func(ctx context.Context, dir string, n int) error {
			s.started, s.shards = true, n
			s.by = make([]int, size)
			for i := 0; n > 1 && i < n; i++ {
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

// files is the number of files rank q writes.
func (s *ShardSave) files(q int) int {
	n := s.by[q]
	if s.parts {
		n++
	}
	return n
}

// collect waits for every rank that writes files to report them.
func (s *ShardSave) collect(ctx context.Context) ([]rundir.File, error) {
	var out []rundir.File
	for q := 1; q < len(s.by); q++ {
		want := s.files(q)
		if want == 0 {
			continue
		}
		b, err := s.r.await(ctx, shardReportKey(s.seq, q), q, fmt.Sprintf("rank %d's checkpoint files", q), shardWaitLimit)
		if err != nil {
			return nil, err
		}
		var rep shardReport
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("rank %d's report of its checkpoint files %q: %w", q, b, err)
		}
		if rep.Error != "" {
			return nil, fmt.Errorf("rank %d failed to write its checkpoint files: %s", q, rep.Error)
		}
		if len(rep.Files) != want {
			return nil, fmt.Errorf("rank %d reported %d checkpoint files, it owns %d (%d of %d weight shards, optimiser part: %v)", q, len(rep.Files), want, s.by[q], s.shards, s.parts)
		}
		out = append(out, rep.Files...)
	}
	return out, nil
}

// Abandon tells the other ranks, when rank 0 failed before it started
// writing, that it writes no checkpoint (or, when err is
// checkpoint.ErrExists, that the checkpoint is there already), so that
// they stop waiting at once.
func (s *ShardSave) Abandon(ctx context.Context, err error) {
	if s.started || s.told || err == nil {
		return
	}
	s.told = true
	m := shardStart{Error: err.Error()}
	if errors.Is(err, checkpoint.ErrExists) {
		m = shardStart{Exists: true}
	}
	s.publish(ctx, m) // best effort: they time out otherwise
}

// Summary is rank 0's line about who wrote checkpoint k's files; empty
// when rank 0 wrote them all.
func (s *ShardSave) Summary(k int64) string {
	if !s.started {
		return ""
	}
	var lines []string
	if s.shards > 1 {
		by := make([]string, 0, len(s.by))
		for q, c := range s.by {
			if c > 0 {
				by = append(by, fmt.Sprintf("%d by rank %d", c, q))
			}
		}
		lines = append(lines, fmt.Sprintf("%d weight shards written in parallel by %d ranks: %s", s.shards, len(by), strings.Join(by, ", ")))
	}
	if s.parts {
		lines = append(lines, fmt.Sprintf("the optimiser state in %d parts, each rank's written by it", len(s.by)))
	}
	return fmt.Sprintf("checkpoint %d: %s", k, strings.Join(lines, "; "))
}

// WriteShards is a follower's part of committing the checkpoint rank 0
// saves for the learn command followed last: when the weights take more
// than one shard and this rank owns some, or ck carries this rank's part
// of the optimiser state (ck.OptimizerParts), it waits for rank 0's
// directory, writes its files there and reports them (or its failure) to
// rank 0.
func (r *Ranks) WriteShards(ctx context.Context, ck checkpoint.Checkpoint, opts checkpoint.SaveOptions) error {
	rank, size := r.Group.Rank(), r.Group.Size()
	n, err := checkpoint.WeightShards(ck, opts)
	if err != nil {
		return err
	}
	parts := ck.OptimizerParts > 1 && !ck.ServingOnly
	if !parts && (n <= 1 || rank >= n) {
		return nil
	}
	seq := r.seq
	b, err := r.await(ctx, shardStartKey(seq), 0, "rank 0's directory to write the checkpoint files into", shardWaitLimit)
	if err != nil {
		return err
	}
	var st shardStart
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("rank 0's checkpoint directory %q: %w", b, err)
	}
	switch {
	case st.Exists:
		return nil
	case st.Error != "":
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
		return errors.Join(err, fmt.Errorf("reporting the checkpoint files to rank 0: %w", serr))
	}
	return err
}
