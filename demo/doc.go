// Package demo is the embedded demo: a tiny policy warm-started on invented
// facts, trained with AIPO against built-in collaborators, and evaluated
// without them on entities whose facts only a collaborator knew.
package demo
