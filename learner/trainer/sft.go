package trainer

import (
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// SFTStep takes one optimiser step of supervised fine-tuning on seqs: the
// mean negative log-likelihood of the response tokens (prompt tokens, and
// response tokens marked in Sequence.Skip, are context only). It returns
// the loss before the step and the gradient norm.
func (l *Learner) SFTStep(seqs []Sequence, microBatchTokens int) (lossVal, gradNorm float64, err error) {
	if len(seqs) == 0 {
		return 0, 0, errors.New("trainer: empty SFT batch")
	}
	order := make([]int, len(seqs))
	n := 0
	for i := range order {
		if len(seqs[i].Prompt) == 0 {
			return 0, 0, fmt.Errorf("trainer: SFT sequence %d has an empty prompt (at least one token, e.g. BOS, must precede the response)", i)
		}
		if seqs[i].Skip != nil && len(seqs[i].Skip) != len(seqs[i].Response) {
			return 0, 0, fmt.Errorf("trainer: SFT sequence %d has %d skip flags for %d response tokens", i, len(seqs[i].Skip), len(seqs[i].Response))
		}
		order[i] = i
		for j := range seqs[i].Response {
			if !skipped(seqs[i], j) {
				n++
			}
		}
	}
	if n == 0 {
		return 0, 0, errors.New("trainer: SFT batch has no response tokens")
	}
	l.keyDropout()
	c := l.policy()
	if err := c.ZeroGrads(); err != nil {
		return 0, 0, err
	}
	inv := float32(1) / float32(n)
	for _, mb := range pack(seqs, order, microBatchTokens) {
		_, err := c.Run(mb.batch, func(lp, _ []float32) ([]float32, error) {
			grad := make([]float32, len(mb.batch.Tokens))
			j := 0
			for _, si := range mb.seqs {
				for t := range seqs[si].Response {
					if pos := mb.scored[j]; !skipped(seqs[si], t) {
						lossVal -= float64(lp[pos])
						grad[pos] = -inv
					}
					j++
				}
			}
			return grad, nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	if gradNorm, err = l.optimiserStep(); err != nil {
		return 0, 0, err
	}
	return lossVal / float64(n), gradNorm, nil
}

func skipped(s Sequence, j int) bool { return s.Skip != nil && s.Skip[j] }

// MeanNLL is the mean negative log-likelihood of the response tokens of seqs
// under m, without changing anything.
func MeanNLL(m *model.Model, seqs []Sequence, microBatchTokens int) (float64, error) {
	lps, err := logProbs(CPU(m), seqs, microBatchTokens)
	if err != nil {
		return 0, err
	}
	var s float64
	n := 0
	for _, lp := range lps {
		for _, v := range lp {
			s -= float64(v)
			n++
		}
	}
	if n == 0 {
		return 0, errors.New("trainer: no response tokens")
	}
	return s / float64(n), nil
}
