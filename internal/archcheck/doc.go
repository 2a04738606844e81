// Package archcheck holds the test of the module's import rules. Imports
// run one way: cmd/aipo -> pipelines/ -> (transforms/, learner/) ->
// schemas/, with internal/ below them all; transforms/ and learner/ do
// not import each other. In detail:
//
//   - only cmd/aipo, the main package, imports learner/cuda (it registers
//     the cuda backend; everything else reaches backends through
//     learner/backend's registry). Test files may import it: a test binary
//     links the backends it runs on, as the main package does;
//   - nothing under internal/ imports learner/, pipelines/, transforms/ or
//     cmd/, test files included;
//   - nothing under learner/ imports pipelines/, transforms/ or cmd/, test
//     files included;
//   - nothing under schemas/ imports learner/, pipelines/, transforms/ or
//     cmd/, and nothing under transforms/ imports learner/, pipelines/ or
//     cmd/ outside its test files;
//   - nothing outside cmd/ imports cmd/.
//
// The test reads every Go file's imports with go/parser, whatever its build
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
