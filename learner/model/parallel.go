package model

import (
	"runtime"

	"github.com/aipo-rl/aipo/learner/par"
)

// parallelFor and parallelTasks are the model's names for par.For and
// par.Tasks.
var (
	parallelFor   = par.For
	parallelTasks = par.Tasks
)

func workers() int { return runtime.GOMAXPROCS(0) }
