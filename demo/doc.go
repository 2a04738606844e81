// Package demo is the embedded demo: a tiny policy warm-started on invented
// facts, trained with AIPO against built-in collaborators, and evaluated
// without them on entities whose facts only a collaborator knew. Run runs
// it end to end around the training stage it is given (aipo demo gives
// train/wire's Run); Config is its configuration.
package demo
