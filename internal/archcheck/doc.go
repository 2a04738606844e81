// Package archcheck holds the tests of the module's layout. Imports run one
// way, down these layers (docs/architecture.md draws them):
//
//	cmd/aipo                          the command
//	tasks/<name>                      the tasks the command links (plug-ins)
//	train/, serve/, plan/             the stages a command runs
//	inproc/                           the in-process policy
//	pipelines/                        the Beam graphs: rollout, eval, analytics
//	runconfig/                        the run configuration
//	transforms/    learner/           the pipelines' parts; the learner
//	records/, schemas/, tasks         what crosses stages; a task's settings
//	internal/                         shared plumbing
//
// In detail:
//
//   - only cmd/aipo, the main package, imports learner/cuda (it registers
//     the cuda backend; everything else reaches backends through
//     learner/backend's registry). Test files may import it: a test binary
//     links the backends it runs on, as the main package does;
//   - internal/ imports nothing of the module outside internal/, test files
//     included; schemas/ nothing but internal/;
//   - learner/ imports nothing of transforms/, records/ or the layers above
//     them, test files included; transforms/ nothing of learner/ or above,
//     records/ nothing of transforms/ or above (outside test files);
//   - pipelines/ and runconfig/ import none of the stages, inproc/ or cmd/;
//     serve/ none of the other stages or the Beam graphs (its tests check
//     it against train's loading of the same directories);
//   - a task (tasks/<name>, with its subpackages) is imported by cmd/ and
//     its own packages only, the rest of the module reaching it through
//     the registrations it makes; test files may import one (a test
//     binary links the tasks it runs on, as the command does); a task
//     imports no other task; package tasks, what they share, imports
//     nothing of the module but internal/ and schemas/;
//   - nothing outside cmd/ imports cmd/;
//   - every package under pipelines/ builds a Beam graph.
//
// The tests read every Go file's imports with go/parser, whatever its build
// constraints, so a file built only on another platform or under a tag
// counts too.
//
// A second test keeps loading a configuration free of Beam: the dependency
// closure (go list -deps) of runconfig, evalconfig and the Beam-free
// configuration halves of transforms (promptsource, guidance) holds no
// package of the Beam SDK but those internal/storage reaches through
// Beam's filesystem packages, the only ones of Beam it may import. A
// failure names the import chain that reaches Beam.
package archcheck
