package verify

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// IntegerVerifier verifies answers that are exact integers. The zero value
// takes the last integer of the response.
type IntegerVerifier struct {
	// Marker, when set, means the answer is the integer right after the last
	// occurrence of Marker (for example "="), spaces allowed in between.
	Marker string
	// Terminator, when set, must follow the integer (spaces allowed in
	// between), for example ";"; a response without it scores 0.
	Terminator string
	// BoxedOnly, without a Marker, takes the answer from the last
	// \boxed{} only, never the last integer of the text (the strict form).
	BoxedOnly bool
}

// StrictForm implements Stricter: a verifier with a Marker already reads a
// marked answer only; one without reads the last \boxed{} only.
func (v IntegerVerifier) StrictForm() Verifier {
	if v.Marker == "" {
		v.BoxedOnly = true
	}
	return v
}

// reIntegerLike matches an integer and any fractional or grouped tail, so
// that "3.5" is read whole and rejected rather than read as 5.
var reIntegerLike = regexp.MustCompile(`[-+]?\d+(?:[.,/]\d+)*`)

// Verify implements Verifier. Only plain digits count: a number with a
// fractional part ("453.0"), a fraction or digit grouping ("1,000") is not an
// exact integer and scores 0.
func (v IntegerVerifier) Verify(response, groundTruth string) Result {
	want, ok := new(big.Int).SetString(strings.TrimPrefix(strings.TrimSpace(groundTruth), "+"), 10)
	if !ok {
		return verdict(false, "", fmt.Sprintf("ground truth %q is not an integer", groundTruth))
	}
	var digits, rest string
	if v.Marker != "" {
		i := strings.LastIndex(response, v.Marker)
		if i < 0 {
			return verdict(false, "", fmt.Sprintf("no %q in the response", v.Marker))
		}
		after := strings.TrimLeft(response[i+len(v.Marker):], " \t")
		loc := reIntegerLike.FindStringIndex(after)
		if loc == nil || loc[0] != 0 {
			return verdict(false, "", fmt.Sprintf("no integer after the last %q", v.Marker))
		}
		digits, rest = after[:loc[1]], after[loc[1]:]
	} else if v.BoxedOnly {
		b, ok := ExtractBoxed(response)
		if !ok {
			return verdict(false, "", "no \\boxed{} answer in the response")
		}
		b = strings.TrimSpace(b)
		loc := reIntegerLike.FindStringIndex(b)
		if loc == nil || loc[0] != 0 || loc[1] != len(b) {
			return verdict(false, b, fmt.Sprintf("boxed answer %q is not an integer", b))
		}
		digits = b
	} else {
		locs := reIntegerLike.FindAllStringIndex(response, -1)
		if locs == nil {
			return verdict(false, "", "no integer in the response")
		}
		loc := locs[len(locs)-1]
		digits, rest = response[loc[0]:loc[1]], response[loc[1]:]
	}
	if strings.ContainsAny(digits, ".,/") {
		return verdict(false, digits, fmt.Sprintf("%q is not an exact integer", digits))
	}
	if v.Terminator != "" && !strings.HasPrefix(strings.TrimLeft(rest, " \t"), v.Terminator) {
		return verdict(false, digits, fmt.Sprintf("answer %s is not terminated by %q", digits, v.Terminator))
	}
	got, ok := new(big.Int).SetString(strings.TrimPrefix(digits, "+"), 10)
	if !ok {
		return verdict(false, digits, fmt.Sprintf("%q is not an integer", digits))
	}
	if got.Cmp(want) == 0 {
		return verdict(true, digits, "integer "+digits+" is correct")
	}
	return verdict(false, digits, fmt.Sprintf("integer %s, expected %s", digits, want))
}
