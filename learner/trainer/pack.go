package trainer

import "github.com/aipo-rl/aipo/learner/model"

// Sequence is one training sequence: the prompt ids followed by the response
// ids, with per-response-token data for the loss.
type Sequence struct {
	Prompt   []int32
	Response []int32
	// Index is the sequence's position in the caller's list (trajectory
	// index); it becomes loss.Inputs.Seq.
	Index int
	// Skip, when set (len(Response) entries), marks response tokens that
	// SFTStep does not train (context only). Nil trains every one.
	Skip []bool
}

// Len is the number of tokens the model sees.
func (s Sequence) Len() int { return len(s.Prompt) + len(s.Response) }

// microBatch is a packed run of sequences with the mapping from the model's
// token positions to response tokens.
type microBatch struct {
	seqs  []int // indices into the sequence list
	batch model.Batch
	// scored[j] is the model position whose log-prob scores response token
	// j of this micro-batch (response tokens laid out in sequence order).
	scored []int
}

// split sets out[i], for each sequence i of the micro-batch, to the
// log-probs of its response tokens, read from all (a pass's log-prob of
// every position of the micro-batch).
func (mb microBatch) split(out [][]float32, seqs []Sequence, all []float32) {
	k := 0
	for _, i := range mb.seqs {
		lp := make([]float32, len(seqs[i].Response))
		for j := range lp {
			lp[j] = all[mb.scored[k]]
			k++
		}
		out[i] = lp
	}
}

// pack groups sequences, in order, into micro-batches of at most budget
// tokens (a longer sequence gets a micro-batch of its own).
func pack(seqs []Sequence, order []int, budget int) []microBatch {
	var out []microBatch
	var cur microBatch
	tokens := 0
	flush := func() {
		if len(cur.seqs) > 0 {
			out = append(out, cur)
		}
		cur, tokens = microBatch{}, 0
	}
	for _, i := range order {
		s := seqs[i]
		if tokens > 0 && tokens+s.Len() > budget {
			flush()
		}
		base := len(cur.batch.Tokens)
		cur.seqs = append(cur.seqs, i)
		cur.batch.Tokens = append(cur.batch.Tokens, s.Prompt...)
		cur.batch.Tokens = append(cur.batch.Tokens, s.Response...)
		cur.batch.SeqLens = append(cur.batch.SeqLens, s.Len())
		for t := 0; t < s.Len(); t++ {
			target := int32(-1)
			if t >= len(s.Prompt)-1 && t+1 < s.Len() {
				target = cur.batch.Tokens[base+t+1]
			}
			cur.batch.Targets = append(cur.batch.Targets, target)
		}
		for j := range s.Response {
			cur.scored = append(cur.scored, base+len(s.Prompt)-1+j)
		}
		tokens += s.Len()
	}
	flush()
	return out
}
