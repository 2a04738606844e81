// Package collective is the learner's collective-communication layer: one Comm interface over the Gloo (CPU) and NCCL (GPU) engines, with a torchrun-style rendezvous through a key-value store served by rank 0.
//
// A process learns its place from the launcher's environment (Env, from
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, or Slurm's
// SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID), joins the group with Join
// (rank 0 serves the store; every rank checks in and heartbeats through
// it) and opens a communicator on it: gloo.New for host memory, nccl.New
// for device memory. Every collective is bounded by the deadline of its
// context, or by Options.OpTimeout when the context has none, and fails
// with an *OpError whose Suspects name the ranks that stopped answering,
// exited or reported a failure of their own.
//
// The engines move the data; the store carries only control: addresses,
// NCCL's unique id, heartbeats and failure reports.
package collective
