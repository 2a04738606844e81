package train

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/train/samples"
)

// checkVersions refuses step k when a trajectory the learner would train
// on was sampled by weights other than those the run allows: checkpoint
// k's policy version k, or with maxStale > 0 one of the maxStale versions
// before it. Each trajectory's version is the one the policy server named
// in its answers (the oldest, when several did), so a server that was not
// told about a new checkpoint, or came back from a restart with older
// weights, shows here. A step that trains groups carried into it
// (rollout.carry) widens the bound by carried, the most steps one of them
// was held back (its manifest's carry_steps_max): a sample is bounded
// when it starts, as AReaL's max_head_offpolicyness is, and the steps it
// then waits in carried groups do not count against it.
func checkVersions(k int64, trajs []schemas.Trajectory, maxStale, carried int64) error {
	lo := max(0, k-maxStale-carried)
	counts := map[int64]int{}
	bad, total := 0, 0
	newer := false
	for _, t := range trajs {
		if !samples.Trainable(t) {
			continue
		}
		total++
		v := t.PolicyVersion
		counts[v]++
		if v < lo || v > k {
			bad++
			newer = newer || v > k
		}
	}
	if bad == 0 {
		return nil
	}
	versions := make([]int64, 0, len(counts))
	for v := range counts {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	found := make([]string, len(versions))
	for i, v := range versions {
		found[i] = fmt.Sprintf("%d (%d)", v, counts[v])
	}
	allowed := fmt.Sprintf("version %d", k)
	if lo < k {
		allowed = fmt.Sprintf("versions %d..%d", lo, k)
	}
	why := fmt.Sprintf("the policy server was not serving checkpoint %d while the step was sampled (it was not told of it, or restarted with older weights): "+
		"set policy.sync so that aipo train pushes every checkpoint to the servers before the rollout (docs/operators.md), or allow the lag with policy.max_staleness: %d",
		k, k-versions[0])
	if len(versions) == 1 && versions[0] == 0 {
		why += "; a server that names no version in its answers (vLLM) is recorded as version 0 unless policy.sync tells it the checkpoint"
	}
	if newer {
		why = fmt.Sprintf("a version newer than checkpoint %d sampled it: the policy server serves the weights of another run, or of a later checkpoint of this one; point policy.endpoint at this run's servers", k)
	}
	held := ""
	if carried > 0 {
		held = fmt.Sprintf(", widened by %d for the groups carried into it", carried)
	}
	return &VersionError{Step: k, Newer: newer, Versions: versions, msg: fmt.Sprintf("learn step %d: %d of the %d trajectories were sampled by policy versions outside the %s this step allows (policy.max_staleness %d%s); versions found (trajectories): %s. "+
		"That is off-policy data the loss would treat as on-policy. %s; then roll step %d out again (aipo rollout --config <run.yaml> --step %d --force, which first pushes the checkpoint when policy.sync is set) and rerun; checkpoint %d was not written",
		k, bad, total, allowed, maxStale, held, strings.Join(found, ", "), why, k, k, k+1)}
}

// VersionError is checkVersions' refusal of a step sampled by other
// weights than the run allows.
type VersionError struct {
	Step int64
	// Newer: a version after the step's checkpoint sampled some of it (a
	// server of another run, or of a later checkpoint): pushing the
	// step's checkpoint again would not explain it.
	Newer bool
	// Versions are the versions found, in order.
	Versions []int64
	msg      string
}

func (e *VersionError) Error() string { return e.msg }
