// Package prompts reads prompt datasets in Beam pipelines: Read turns a list
// of prompt files into PCollection<schemas.Prompt> and a dead-letter
// PCollection<DeadLetter>, and WriteDeadLetters writes the dead letters to
// one JSONL file. The parsing itself (formats, field mapping, presets, the
// reasons a row is dead-lettered) lives in the Beam-free subpackage
// promptfile, whose Source and DeadLetter types this package re-exports.
//
// It also adds a step's draws from a run's data.sources to the rollout
// pipeline (Draw: the first draw, and the further draws of dynamic
// sampling), with the draw registered for the sources' kind; the kinds
// themselves, their settings, checks and defaults, live in the Beam-free
// subpackage promptsource, which the run configuration reads. The draws of
// the kinds file and demo are registered by transforms/trajectories, next
// to the selections they draw with.
package prompts
