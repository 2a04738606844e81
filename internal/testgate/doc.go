// Package testgate reads the event stream of `go test -json` and prints
// what plain `go test` prints (each package's ok or FAIL line, the output
// of failing tests, build errors), while recording every skipped test. At
// the end it lists the skips, each either allowed by a committed list (with
// the list's reason) or not, and judges the run: it fails when a package
// failed, when a package never finished (a crashed or killed test binary),
// or when a test skipped without the list allowing it. make test runs its
// command, testgate, over the main go test run, so that a skip (a missing
// peer, a missing data file, -short) cannot pass unseen.
package testgate
