// Package records holds the records that cross a run's stages: what the
// learner wrote for a step (Learn), an evaluation of a checkpoint on the
// demo task (Eval) and on held-out benchmarks (BenchmarkEval), the
// rollout's step figures they carry (RolloutMeta), and the training loop's
// progress reports (Progress), which its evaluations send too. The loop
// writes them under the run directory (internal/rundir names every path);
// aipo analyze, the TensorBoard writer, the demo's report and a resumed run
// read them back through this package, which builds no Beam graph.
package records
