package model

import "fmt"

// Batch is a packed batch: the tokens of several sequences laid end to end.
// Positions restart at 0 in each sequence and attention never crosses from
// one sequence into another.
type Batch struct {
	// Tokens are the input token ids of all sequences, concatenated [N].
	Tokens []int32
	// SeqLens are the lengths of the sequences in order; they sum to
	// len(Tokens). Nil means one sequence.
	SeqLens []int
	// Targets[t] is the token whose log-probability is wanted after
	// Tokens[0..t] of t's sequence, or -1 for none. Nil means the next token
	// of the same sequence (and -1 at each sequence's last token).
	Targets []int32
}

// prepared is a validated batch with its derived per-token data.
type prepared struct {
	tokens, targets, pos []int32
	segs                 []segment
	rows                 []int32 // tokens that have a target, ascending
	maxLen               int
	cos, sin             []float32 // rotary rows for positions < maxLen
}

func (m *Model) prepare(b Batch, allRows bool) (*prepared, error) {
	p, err := prepareBatch(m.cfg, b, allRows)
	if err != nil {
		return nil, err
	}
	p.cos, p.sin = m.rope.upTo(p.maxLen)
	return p, nil
}

// BatchLayout is a validated batch's per-token data, which every backend
// derives the same way.
type BatchLayout struct {
	Tokens  []int32 // input ids [N]
	Targets []int32 // target ids, -1 for none [N]
	Pos     []int32 // position of each token in its sequence [N]
	SeqLens []int   // sequence lengths, summing to N
	Rows    []int32 // tokens that have a target, ascending
	MaxLen  int     // longest sequence
}

// Layout validates b for a model of configuration c, with the errors
// Forward would return, and derives its per-token data.
func Layout(c Config, b Batch) (BatchLayout, error) {
	p, err := prepareBatch(c, b, false)
	if err != nil {
		return BatchLayout{}, err
	}
	l := BatchLayout{Tokens: p.tokens, Targets: p.targets, Pos: p.pos, Rows: p.rows, MaxLen: p.maxLen}
	for _, sg := range p.segs {
		l.SeqLens = append(l.SeqLens, sg.n)
	}
	return l, nil
}

func prepareBatch(c Config, b Batch, allRows bool) (*prepared, error) {
	N := len(b.Tokens)
	if N == 0 {
		return nil, fmt.Errorf("model: batch has no tokens")
	}
	lens := b.SeqLens
	if lens == nil {
		lens = []int{N}
	}
	p := &prepared{tokens: b.Tokens, pos: make([]int32, N)}
	start := 0
	for i, n := range lens {
		if n <= 0 {
			return nil, fmt.Errorf("model: batch SeqLens[%d] = %d; sequence lengths must be positive", i, n)
		}
		if start+n > N {
			return nil, fmt.Errorf("model: batch SeqLens sum past the %d tokens (at sequence %d)", N, i)
		}
		if n > c.MaxPositionEmbeddings {
			return nil, fmt.Errorf("model: batch sequence %d has %d tokens, more than max_position_embeddings %d", i, n, c.MaxPositionEmbeddings)
		}
		p.segs = append(p.segs, segment{start: start, n: n})
		for j := 0; j < n; j++ {
			p.pos[start+j] = int32(j)
		}
		p.maxLen = max(p.maxLen, n)
		start += n
	}
	if start != N {
		return nil, fmt.Errorf("model: batch SeqLens sum to %d but there are %d tokens", start, N)
	}
	V := int32(c.VocabSize)
	for t, tok := range b.Tokens {
		if tok < 0 || tok >= V {
			return nil, fmt.Errorf("model: batch token %d at position %d is outside the vocabulary [0,%d)", tok, t, V)
		}
	}
	switch {
	case b.Targets == nil:
		p.targets = make([]int32, N)
		for _, sg := range p.segs {
			copy(p.targets[sg.start:sg.start+sg.n-1], b.Tokens[sg.start+1:])
			p.targets[sg.start+sg.n-1] = -1
		}
	case len(b.Targets) != N:
		return nil, fmt.Errorf("model: batch has %d targets for %d tokens", len(b.Targets), N)
	default:
		for t, tok := range b.Targets {
			if tok < -1 || tok >= V {
				return nil, fmt.Errorf("model: batch target %d at position %d is outside [-1,%d)", tok, t, V)
			}
		}
		p.targets = b.Targets
	}
	for t, tok := range p.targets {
		if tok >= 0 || allRows {
			p.rows = append(p.rows, int32(t))
		}
	}
	return p, nil
}
