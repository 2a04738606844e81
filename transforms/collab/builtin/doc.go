// Package builtin holds deterministic collaborators for the embedded demo
// task (kind builtin-demo), so that rollouts run with no model server:
//
//   - Knowledge answers an entity name with its value from the task's
//     knowledge base ("lugr" -> "450"); with the configured noise
//     probability it answers a wrong value from the same range instead
//     (Noisy set). Unknown names get "unknown".
//   - Reason computes an arithmetic expression exactly ("450+3" -> "453";
//     see Eval); anything else gets "invalid".
//   - Verify checks a claimed equation or fact ("450+3=453", "lugr=450",
//     "lugr+3=453") and answers "yes" or "no"; "unknown" when it names an
//     entity it does not know, "invalid" when the claim does not parse.
//
// Every answer is a pure function of the query text, the step and the seed.
package builtin
