// Package demo is the embedded demo task: integer questions about invented
// entities, whose facts a small model can only learn from a collaborator.
// It is a task package (package tasks): its init registers the kind of
// prompt source demo, the draw of its questions, the verifier of
// data_source demo, the collaborator kind builtin-demo and the benchmark
// presets of its splits (demo-all, demo-seen, demo-unseen), which the eval
// pipeline scores like any other: a run's eval.splits and aipo eval alike.
// It also holds the
// warm start, the supervised training of the tiny policy on the task's
// corpus. Package demorun runs the whole demo (aipo demo).
//
// Every entity is a made-up four-letter name with a value in 100..999 (wide
// enough that guessing does not pay: with values in 10..99 a policy without
// collaborators learned to guess). The entities are split: the warm-start
// model is taught the facts of the "seen" half; the "unseen" half is known
// only to the Knowledge Agent. A question names an entity and a small number
// N; the answer is value+N.
//
// Text forms (the tags are single tokens of the built-in tokenizer):
//
//	prompt:  lugr+3?
//	direct:  <result>450</result>450+3=453;
//	calling: <retrieval>lugr</retrieval><result>450</result>450+3=453;
//
// In the calling form the policy writes the query and the opening <result>
// itself; the Knowledge Agent appends only "450</result>". A response is
// correct when the number after its last '=' is the answer and is followed
// by the terminator ';'.
package demo
