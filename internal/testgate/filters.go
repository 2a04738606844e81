package testgate

import "strings"

// leavesOut are the go test flags that leave tests out of a run without a
// skip event: a -run or -skip pattern drops tests unseen, -list runs none,
// -short makes tests return early (those that skip are seen, those that
// shorten themselves are not), and a -bench run with -run '^$' is no test
// run at all.
var leavesOut = []string{"run", "skip", "list", "short"}

// Filters returns the arguments of a go test command line that leave
// tests out (see leavesOut), each as given ("-run", "-run=TestX",
// "-test.short"), with the value that follows a flag given alone. A run
// meant to be the whole suite (make test's) refuses them: the gate sees
// the skips a run makes, not the tests it never started.
func Filters(args []string) []string {
	var got []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name = strings.TrimPrefix(name, "test.")
		name, value, hasValue := strings.Cut(name, "=")
		for _, f := range leavesOut {
			if name != f {
				continue
			}
			if f == "short" {
				if !hasValue || value != "false" {
					got = append(got, a)
				}
				break
			}
			if !hasValue && i+1 < len(args) {
				a += " " + args[i+1]
				i++
			}
			got = append(got, a)
			break
		}
	}
	return got
}
