package verify

import (
	"fmt"
	"regexp"
	"strings"
)

// ChoiceVerifier verifies multiple-choice answers given as letters. The zero
// value accepts the letters A to J.
type ChoiceVerifier struct {
	// Letters are the valid choices, upper case ("ABCD"); empty means A-J.
	Letters string
	// BoxedOnly accepts only a boxed letter (the strict form).
	BoxedOnly bool
}

// StrictForm implements Stricter: a boxed letter only.
func (v ChoiceVerifier) StrictForm() Verifier {
	return ChoiceVerifier{Letters: v.Letters, BoxedOnly: true}
}

func (v ChoiceVerifier) letters() string {
	if v.Letters == "" {
		return "ABCDEFGHIJ"
	}
	return strings.ToUpper(v.Letters)
}

var (
	reChoiceParen = regexp.MustCompile(`\(([A-Z])\)`)
	reChoiceLead  = regexp.MustCompile(`^\(?([A-Z])(?:\)|\.|:|\s|$)`)
)

// ExtractChoice finds the chosen letter in a response: a boxed letter, then
// the letter after an answer phrase, then the last "(X)", then a response
// that is only a letter. Letters are upper case and limited to letters.
func ExtractChoice(response, letters string) (string, bool) {
	if letters == "" {
		letters = "ABCDEFGHIJ"
	}
	if b, ok := ExtractBoxed(response); ok {
		if l, ok := choiceLetter(b, letters); ok {
			return l, true
		}
	}
	if p, ok := phraseAnswer(response); ok {
		if l, ok := choiceLetter(p, letters); ok {
			return l, true
		}
	}
	ms := reChoiceParen.FindAllStringSubmatch(response, -1)
	for i := len(ms) - 1; i >= 0; i-- {
		if strings.Contains(letters, ms[i][1]) {
			return ms[i][1], true
		}
	}
	return choiceLetter(response, letters)
}

// choiceLetter reads a letter at the start of s: "B", "(B)", "B.", "B) 42",
// "\text{(B)}", "**B**".
func choiceLetter(s, letters string) (string, bool) {
	s = stripTextCommands(strings.TrimSpace(s))
	s = strings.Trim(strings.TrimSpace(s), "*$ ")
	m := reChoiceLead.FindStringSubmatch(s)
	if m == nil || !strings.Contains(letters, m[1]) {
		return "", false
	}
	return m[1], true
}

// Verify implements Verifier. The ground truth is a letter, optionally in
// parentheses or \text{}.
func (v ChoiceVerifier) Verify(response, groundTruth string) Result {
	letters := v.letters()
	gt, ok := choiceLetter(groundTruth, letters)
	if !ok {
		return verdict(false, "", fmt.Sprintf("ground truth %q is not one of the choices %s", groundTruth, letters))
	}
	var got string
	if v.BoxedOnly {
		if b, found := ExtractBoxed(response); found {
			got, ok = choiceLetter(b, letters)
		} else {
			ok = false
		}
		if !ok {
			return verdict(false, "", "no \\boxed{} choice letter in the response")
		}
	} else if got, ok = ExtractChoice(response, letters); !ok {
		return verdict(false, "", "no choice letter in the response")
	}
	if got == gt {
		return verdict(true, got, "choice "+got+" is correct")
	}
	return verdict(false, got, fmt.Sprintf("choice %s, expected %s", got, gt))
}
