// Package engine samples from the learner's model for rollouts and for a
// server: many sequences decoded together with a KV cache, sessions that
// keep their cache between calls, and weights swapped between steps.
//
// One scheduler goroutine owns every sequence. Requests wait in a bounded
// queue (Generate fails with ErrQueueFull when it is full) and join the
// running batch between decode steps; each step feeds every active
// sequence its pending tokens in one model.Extend call (a new sequence's
// prompt, in chunks of Config.PrefillChunk; a decoding sequence's last
// sampled token), then samples one token for each sequence whose pending
// tokens are all fed. A finished or cancelled sequence leaves between
// steps, so short and long requests share the batch (continuous batching).
//
// Sampling: temperature 0 is greedy (the lowest id among equal maxima);
// otherwise the logits are divided by the temperature, cut to the top-k
// and then to the smallest set of most likely tokens whose probability
// reaches top-p, and one token is drawn with the request's own random
// stream (PCG seeded from Params.Seed), one draw per token. The same seed,
// prefix and parameters give the same tokens whatever else the engine is
// doing: the stream is the request's own, prompt chunks depend only on the
// request, and model.Extend computes a sequence's logits bit for bit alike
// in any batch. With sessions, the same holds for the same history of
// calls (a cache filled by earlier calls is fed in other chunks than a
// fresh prompt, which changes logits by rounding). Seeds are taken as
// given: samples of one prompt that should differ need different seeds.
//
// Log-probabilities: Result.LogProbs[i] is log softmax of the raw logits
// (before temperature, top-k and top-p) at the sampled token, computed with
// the arithmetic of the learner's forward pass (model.LogSumExp), so it is
// the policy's log pi_old of the token, comparable with the learner's
// log-probs of the same sequence.
//
// Stops: generation ends after an end-of-sequence token ("eos"), a stop
// token id or stop string ("stop"; the matching token is part of the
// output), MaxTokens new tokens or a full context ("length"). Stop strings
// are matched where the newest token completes them: on the decoded bytes
// of the output, preceded by those of the prefix's last tokens, so that
// one begun in the prefix (a call continued after an interruption) and
// completed by the output counts, and one wholly in the prefix does not.
//
// Sessions: a request with a Session name keeps its sequence's cache after
// it finishes, in a store bounded by Config.SessionTokens cached positions
// and evicted least recently used first. A later request of the session
// whose prefix starts with the cached tokens feeds only the rest (the
// previous output's last token and, typically, a collaborator's answer);
// a prefix that departs from the cache reuses the common part and feeds
// the remainder; a cache of other weights is dropped. Two requests of one
// session running at once each work, the later finisher's cache is kept.
//
// Reload swaps the weights between steps. Sequences already running finish
// on the weights they started with (each Result names its PolicyVersion,
// and all its tokens and log-probs come from that version); requests
// admitted afterwards, queued ones included, use the new weights. Cached
// sessions of older weights are dropped.
package engine
