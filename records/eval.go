package records

// Eval is an evaluation of one checkpoint of the policy alone, as
// stored in <run>/metrics/eval-NNNNNN.json.
type Eval struct {
	Kind          string       `json:"kind"` // "eval"
	Step          int64        `json:"step"` // the checkpoint evaluated
	PolicyVersion int64        `json:"policy_version"`
	Splits        []SplitScore `json:"splits"`
	Seconds       float64      `json:"seconds"`
}

// Score returns the score of a split.
func (r Eval) Score(split string) (SplitScore, bool) {
	for _, s := range r.Splits {
		if s.Split == split {
			return s, true
		}
	}
	return SplitScore{}, false
}

// SplitScore is the accuracy of the policy alone on one split.
type SplitScore struct {
	Split     string  `json:"split"`
	Questions int     `json:"questions"`
	Greedy    float64 `json:"greedy"`    // accuracy of greedy decoding
	AvgK      float64 `json:"avg_k"`     // mean accuracy over k samples
	PassK     float64 `json:"pass_k"`    // unbiased Pass@k (Chen et al. 2021) with n = k
	CallRate  float64 `json:"call_rate"` // greedy responses that write a call
	K         int     `json:"k"`
	StdErrAvg float64 `json:"stderr_avg"` // standard error of AvgK over questions
}
