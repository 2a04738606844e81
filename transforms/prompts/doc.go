// Package prompts reads prompt datasets in Beam pipelines: Read turns a list
// of prompt files into PCollection<schemas.Prompt> and a dead-letter
// PCollection<DeadLetter>, and WriteDeadLetters writes the dead letters to
// one JSONL file. The parsing itself (formats, field mapping, presets, the
// reasons a row is dead-lettered) lives in the Beam-free subpackage
// promptfile, whose Source and DeadLetter types this package re-exports.
//
// It also holds the kinds of prompt source a run's data.sources lists
// (SourceConfig, Sources): a registry of Kinds, each of which checks its
// entries, says what a run drawing from them defaults to (Defaults: the
// batch size, the collaborators, the task evaluated, the prompt length of
// the memory plan) and adds a step's draws to the rollout pipeline (Draw:
// the first draw, and the further draws of dynamic sampling). The kinds
// file and demo are registered by transforms/trajectories, next to the
// selections they draw with.
package prompts
