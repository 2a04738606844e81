package countdown

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/transforms/collab/builtin"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// Verifier scores a Countdown response: the text before its first ';' is
// an expression of integers, + - * / and parentheses (spaces allowed) that
// uses each given number at most once (a number written twice must be
// given twice) and equals the target, computed exactly over the
// rationals. The ground truth is "n1,n2,...=target". It is registered for
// data_source countdown.
type Verifier struct{}

// Verify implements verify.Verifier.
func (Verifier) Verify(response, groundTruth string) verify.Result {
	nums, target, err := ParseAnswer(groundTruth)
	if err != nil {
		return verify.Result{Reason: err.Error()}
	}
	i := strings.Index(response, Terminator)
	if i < 0 {
		return verify.Result{Reason: "no " + strconv.Quote(Terminator) + " ends the expression"}
	}
	expr := response[:i]
	if err := Check(expr, nums, target); err != nil {
		return verify.Result{Extracted: expr, Reason: err.Error()}
	}
	return verify.Result{Correct: true, Score: 1, Extracted: expr, Reason: "the expression uses given numbers at most once each and equals the target"}
}

// ParseAnswer reads a ground truth "n1,n2,...=target".
func ParseAnswer(s string) (nums []int, target int, err error) {
	list, t, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return nil, 0, fmt.Errorf("countdown ground truth %q is not \"n1,n2,...=target\"", s)
	}
	if target, err = strconv.Atoi(t); err != nil {
		return nil, 0, fmt.Errorf("countdown ground truth %q: target %q is not an integer", s, t)
	}
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, 0, fmt.Errorf("countdown ground truth %q: number %q is not an integer", s, f)
		}
		nums = append(nums, n)
	}
	return nums, target, nil
}

// Check reports why expr is not a solution of the puzzle (nums, target);
// nil when it is one.
func Check(expr string, nums []int, target int) error {
	if strings.TrimSpace(expr) == "" {
		return fmt.Errorf("the expression is empty")
	}
	for i, r := range expr {
		if !strings.ContainsRune("0123456789+-*/() ", r) {
			return fmt.Errorf("the expression has %q at byte %d: write integers, + - * /, parentheses", r, i)
		}
	}
	left := slices.Clone(nums)
	for _, f := range strings.FieldsFunc(expr, func(r rune) bool { return r < '0' || r > '9' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("number %q: %v", f, err)
		}
		i := slices.Index(left, n)
		if i < 0 {
			return fmt.Errorf("uses %d, which is not given or is used more often than given", n)
		}
		left = slices.Delete(left, i, i+1)
	}
	v, err := builtin.Eval(expr, nil)
	if err != nil {
		return err
	}
	if v.Cmp(new(big.Rat).SetInt64(int64(target))) != 0 {
		return fmt.Errorf("equals %s, not %d", builtin.Format(v), target)
	}
	return nil
}
