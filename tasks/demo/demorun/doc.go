// Package demorun is the embedded demo end to end (aipo demo): a tiny
// policy warm-started on invented facts (tasks/demo), trained with AIPO
// against built-in collaborators, and evaluated without them on entities
// whose facts only a collaborator knew. Run runs it around the training
// stage it is given (aipo demo gives train/wire's Run); Config is its
// configuration. Package comparison runs it once per method and seed.
package demorun
