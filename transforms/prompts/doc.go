// Package prompts reads prompt datasets in Beam pipelines: Read turns a list
// of prompt files into PCollection<schemas.Prompt> and a dead-letter
// PCollection<DeadLetter>, and WriteDeadLetters writes the dead letters to
// one JSONL file. The parsing itself (formats, field mapping, presets, the
// reasons a row is dead-lettered) lives in the Beam-free subpackage
// promptfile, whose Source and DeadLetter types this package re-exports.
package prompts
