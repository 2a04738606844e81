// Package records holds the records that cross a run's stages: what the
// learner wrote for a step (Learn), an evaluation of a checkpoint on the
// demo task (Eval) and on held-out benchmarks (BenchmarkEval), and the
// rollout's step figures they carry (RolloutMeta). The training loop
// writes them under the run directory (internal/rundir names every path);
// aipo analyze, the TensorBoard writer, the demo's report and a resumed run
// read them back through this package, which builds no Beam graph.
package records
