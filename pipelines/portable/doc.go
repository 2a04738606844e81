// Package portable holds the tests that run the rollout, eval and analytics
// pipelines on Beam's portable ("universal") runner, the job API that
// Flink's job server speaks, against a standalone prism job server bound to
// 127.0.0.1, with the SDK harness in the test process
// (--environment_type=LOOPBACK). It has no code of its own: the pipelines
// run unchanged.
package portable
