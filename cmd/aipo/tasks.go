package main

// The tasks the command links: each registers its kind of prompt source,
// verifier, collaborators and benchmark presets in its init function
// (package tasks describes the registrations).
import (
	_ "github.com/aipo-rl/aipo/tasks/countdown"
	_ "github.com/aipo-rl/aipo/tasks/demo"
)
