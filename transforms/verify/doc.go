// Package verify scores a model's response against a problem's ground truth.
//
// A [Verifier] is chosen by the data_source of a prompt through
// [ForDataSource]: math benchmarks (MATH, MATH500, AIME, AMC, GSM8K,
// DeepScaleR) use [MathVerifier], multiple choice uses [ChoiceVerifier], and
// tasks with an exact integer answer use [IntegerVerifier].
//
// Math verification has two halves. [ExtractAnswer] finds the final answer in
// free text: the last \boxed{...} (or \fbox), then a GSM8K "#### N" line, then
// an "Answer:" / "The answer is" phrase, then the last number (unless the
// verifier is strict, which accepts boxed answers only). [Equivalent] then
// decides whether that answer equals the ground truth:
//
//   - Both strings are normalised: math delimiters, \left and \right, LaTeX
//     spacing (\! \, \;), \dfrac and \tfrac (to \frac), degree signs, dollar
//     signs, units in \text{...} or \mbox{...} and a few plain unit words,
//     a trailing period, number-base subscripts (52_8 reads as 52) and a
//     missing leading zero (.5 reads as 0.5) are removed or rewritten.
//   - The results are parsed into a structure: a scalar expression, a tuple
//     or interval (ordered; the bracket kinds must agree), a set \{...\} or a
//     bare comma list (both unordered), a union of intervals, a matrix, an
//     equation, or plain text. "x = 5" and "x \in [0,1]" compare by their
//     right-hand side, and a \pm expands to the two values it stands for.
//   - Scalars are evaluated by a small expression evaluator (+ - * / ^,
//     implicit multiplication, \frac, \sqrt, \pi, i, factorial, \binom,
//     trigonometric and logarithmic functions) over exact rationals where the
//     arithmetic allows and complex floating point otherwise. Free variables
//     get the same pseudo-random values on both sides at several points.
//   - Two exact rationals compare exactly. Otherwise two values agree when
//     |a-b| <= tol*max(|a|,|b|) (or both are below 1e-12 in size), with
//     tol = 1e-6 when both values are inexact and tol = 1e-9 when one of them
//     is an exact rational: a rounded decimal such as 0.5774 is not accepted
//     for \frac{\sqrt3}{3}, while rounding noise of floating point is.
//   - Percentages: a percent sign is dropped, so "50\%" equals "50"; when
//     only one side carries the sign, its value divided by 100 is accepted as
//     well, so "50\%" also equals "0.5" (but "50" never equals "0.5").
//   - When no structure applies, the normalised strings are compared with
//     spaces removed, and words case-insensitively.
//
// Deliberate limits: units are dropped, not converted (5 cm equals 5 m, and
// 90^\circ does not equal \pi/2); a number-base subscript is dropped when
// only one side has it (52 answers 52_8); expressions with free variables
// are compared by value, so an expanded polynomial equals its factored form;
// ratios such as 1:4 and inequalities compare only as strings. Answers longer
// than 1000 bytes, lists of more than 64 elements and more than three \pm
// signs are compared as plain strings, so that a degenerate response costs
// little.
package verify
