// Package interact runs the AIPO interaction protocol for one trajectory:
// the policy samples, calls the Verify, Knowledge or Reasoning agent by
// writing a tagged query, the agent's answer is appended as token ids of the
// policy's tokenizer, and sampling continues, until the policy ends its
// answer or its token budget runs out. The result is one schemas.Trajectory
// with exact per-token provenance.
//
// # Tags
//
//	<verify>claim</verify>        Verify Agent (collab.Verify)
//	<retrieval>query</retrieval>  Knowledge Agent (collab.Knowledge)
//	<reason>sub-task</reason>     Reasoning Agent (collab.Reason)
//	<result>answer</result>       the answer, appended after the call
//
// The query is the text between the agent's opening tag and its closing tag
// within what the policy wrote since the last answer was appended; when the
// opening tag is missing, it is all of that text.
//
// # Tags on any vocabulary
//
// Calls are found on text, never on token boundaries. The protocol's stop
// strings end a policy call once the decoded output contains one; the
// token that completed it is kept whole (token in, token out: the
// policy's tokens are never re-encoded). On real vocabularies that token
// often carries more characters after the tag: Qwen3 and Llama 3 encode
// "</verify>\n" as "</", "verify", ">\n", and hold hundreds of tokens
// that start with ">" (">.", ">,", ">)", ">So" ...). A closing tag
// completed inside a token is a call all the same; the characters of that
// token after the tag stay the policy's, and the answer block is appended
// after the token, so the response decodes to exactly what the policy and
// the agents wrote, and each interaction's span covers exactly the
// inserted tokens. Tags split over several tokens, opening tags merged
// with a leading space, and tags at the very end are found the same way.
//
// # Who writes the result's opening delimiter (Config.OpenerBy)
//
// "system" (the paper's protocol): the policy stops at a closing agent tag;
// the system appends <result>, the answer and </result>.
//
// "policy": the policy continues past the closing tag and stops just after
// writing <result> itself; only then are the answer and </result> appended.
// A call happens only when <result> follows the closing tag immediately (no
// characters between them): if the policy writes anything else after the
// closing tag, that tag is not a call and sampling simply goes on. Under
// this setting every delimiter the policy needs without collaborators is one
// it sampled during training, so evaluation without collaborators never
// depends on tokens that only the system ever wrote (the demo's lesson).
//
// # Token-level provenance
//
// Every response token has a source (schemas.Source*) and a behaviour
// log-probability: the policy's own log-probability for tokens it sampled,
// 0 for all others. Answer tokens carry their agent's source. The wrappers
// <result> and </result> are encoded with special-token parsing on and
// marked schemas.SourceTemplate; so are the notices that replace an answer
// (a failed call's notice, the limit notice): they are the system's words,
// not the agent's. Whether template tokens are trained is the learner's
// choice (the run configuration's rollout.template_tokens). Each interaction
// records its span [start, end) over the response tokens it inserted.
//
// # Answers cannot open or close a tag
//
// An answer is escaped before it is encoded: every protocol tag in it
// (case-insensitive, spaces inside the brackets allowed) has its angle
// brackets replaced by "&lt;" and "&gt;". It is encoded with special-token
// parsing off, truncated to Config.AnswerTokenBudget tokens, and checked
// after encoding: if any of its tokens is a tag token, or its decoded text
// holds a tag, the answer is withheld and replaced by a notice (status
// error).
//
// # Limits, failures and budgets
//
// At most Config.MaxInteractions calls reach the agents; further tags are
// answered with Config.LimitNotice and status "limit". A collaborator that
// fails for good answers with a notice and status error or timeout (see
// package collab); the trajectory goes on. A policy call that still fails
// after Config.PolicyRetries retries ends the trajectory with finish reason
// "error" (the tokens sampled before it are kept). The response, inserted
// tokens included, never exceeds Config.MaxResponseTokens.
//
// # Reproducibility
//
// The seed of each policy call derives from the run seed, step, prompt id,
// sample index and turn (PolicySeed); each collaborator call's seed from
// the same coordinates and the call index (collab.DeriveSeed). A re-run of
// the same step gives the same trajectories as long as the policy and the
// collaborators are deterministic given their seeds.
package interact
