// Package plan is the memory plan of a run: what `aipo plan` prints and
// `aipo train` checks before step 0. It adds to the learner step's figures
// (trainer.PlanStep, each backend's StepMemory) what a run holds around the
// step (the training state kept between steps, the in-process rollout
// engine and its attention caches, the process itself), each rank's share
// under --nproc and --zero, and the checkpoints' disk, and compares the
// peaks with the machine's memory or a named device's. docs/scaling.md
// gives the formulas.
package plan
