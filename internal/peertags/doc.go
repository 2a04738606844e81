// Package peertags names the build tags that keep peer tests out of a
// plain `go test ./...`, and finds the tests each tag holds.
//
// A peer test is one that runs or needs something outside Go and the
// module's committed files: a Python environment (vLLM, PyTorch and
// transformers, veRL, TensorBoard, TRL), Java (Flink, Beam's Flink and
// Spark job servers), llama.cpp, Node.js (DuckDB's Node API, the OpenAI
// SDK), grpcurl, root's network namespaces, the PROCESS-environment
// binaries make builds, or the files of ../shared/data that are not
// committed. Each sits in a test file whose //go:build line names its tag
// (Tags), so that `go test ./...` and make check, the fast tier, compile
// only tests that run on Go and the committed fixtures; make test passes
// every tag, and make test-TAG installs one peer and runs its tests.
//
// A test that checks something hermetic and then hands one result to a
// peer keeps its hermetic part in the fast tier through a pair of files
// with opposite constraints (//go:build tensorboard and //go:build
// !tensorboard) declaring the same helper: Scan counts a test of an
// untagged file as the tag's when it reaches a name that only the tag's
// files declare.
package peertags
