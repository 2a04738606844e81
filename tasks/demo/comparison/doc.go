// Package comparison trains every method of the demo's comparison (GRPO,
// Expert Iteration, AIPO-Mask, AIPO without IS or CS, AIPO, LUFFY, AIPO
// with a call cost) for several seeds from one shared warm start, on the
// training loop, and writes the report that demo.Comparison renders:
// `aipo demo --compare` and `make reproduce`. A run stopped midway
// continues where it stopped.
package comparison
