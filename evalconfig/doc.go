// Package evalconfig is the configuration of a benchmark evaluation: the
// YAML file of aipo eval (Config, read by Load and Parse; see
// configs/eval*.yaml) and its parts, above all what a benchmark is. A
// Benchmark names a preset (Presets: the files bundled in data/benchmarks,
// with their field mapping, verifier, template and samples) or a prompt
// file of its own; Config.Resolve applies the preset and the run's
// defaults, and checks that its verifier (transforms/verify, or the code
// verifiers mbpp and humaneval) and template (Templates, ParseTemplate)
// exist. Sampling is the responses per problem and the sampling parameters
// of every request.
//
// It builds no Beam graph: pipelines/eval runs a Config, and a training
// run's configuration (runconfig's eval section) lists its held-out
// benchmarks as Benchmarks with one Sampling, so that loading a run's
// configuration links no Beam.
package evalconfig
