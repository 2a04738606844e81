package testgate

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// fieldSep separates the fields of a line of the allow list. A bar with a
// space on each side, so that a regexp's own alternation (TestA|TestB) is
// written without spaces.
const fieldSep = " | "

// Rule is one line of the allow list: a skip is allowed when its package
// is Package, its test's full name matches Test and its message matches
// Message.
type Rule struct {
	Package string         // the import path relative to the module ("learner/cuda"; "." for the module's root)
	Test    *regexp.Regexp // matched against the whole test name (TestX/sub), anchored
	Message *regexp.Regexp // searched for in the skip's message (the test's output without file:line prefixes)
	Reason  string         // why the skip is allowed, printed beside it
	Where   string         // file:line of the rule
}

// AllowList is the committed list of skips make test accepts.
type AllowList struct {
	Rules []Rule
}

// AllowListFormat describes a line of the list, for error messages.
const AllowListFormat = "package | test regexp | skip message regexp | reason (fields separated by ' | '; # starts a comment line)"

// LoadAllowList reads the allow list at path.
func LoadAllowList(path string) (*AllowList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allowed skips: %w", err)
	}
	defer f.Close()
	return ParseAllowList(f, path)
}

// ParseAllowList parses an allow list; name is its file's name in errors.
// Each line that is neither blank nor a comment is a Rule of four fields,
// none empty: package, test regexp, message regexp, reason.
func ParseAllowList(r io.Reader, name string) (*AllowList, error) {
	var al AllowList
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		rule, err := parseRule(line, where)
		if err != nil {
			return nil, err
		}
		al.Rules = append(al.Rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("allowed skips: reading %s: %w", name, err)
	}
	return &al, nil
}

func parseRule(line, where string) (Rule, error) {
	f := strings.SplitN(line, fieldSep, 4)
	if len(f) != 4 {
		return Rule{}, fmt.Errorf("%s: want 4 fields, got %d; a line is %s", where, len(f), AllowListFormat)
	}
	for i, name := range []string{"package", "test regexp", "skip message regexp", "reason"} {
		f[i] = strings.TrimSpace(f[i])
		if f[i] == "" {
			return Rule{}, fmt.Errorf("%s: the %s is empty; a line is %s", where, name, AllowListFormat)
		}
	}
	test, err := regexp.Compile("^(?:" + f[1] + ")$")
	if err != nil {
		return Rule{}, fmt.Errorf("%s: test regexp %q: %w", where, f[1], err)
	}
	msg, err := regexp.Compile(f[2])
	if err != nil {
		return Rule{}, fmt.Errorf("%s: skip message regexp %q: %w", where, f[2], err)
	}
	return Rule{Package: f[0], Test: test, Message: msg, Reason: f[3], Where: where}, nil
}

// Match returns the first rule that allows the skip of test in pkg (a
// module-relative package path) with message, or nil.
func (al *AllowList) Match(pkg, test, message string) *Rule {
	if al == nil {
		return nil
	}
	for i := range al.Rules {
		r := &al.Rules[i]
		if r.Package == pkg && r.Test.MatchString(test) && r.Message.MatchString(message) {
			return r
		}
	}
	return nil
}
