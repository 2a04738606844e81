package storage

import "sync/atomic"

// observer is the function ObserveChanges set, or nil.
var observer atomic.Pointer[func(path string)]

// ObserveChanges has f called with the path after every change this package
// makes to a file or directory (a file closed after writing, written
// atomically, renamed into place, created exclusively, replaced or removed),
// in the order the changes are made, on the goroutine that made each; nil
// stops it. Crash tests use it to stop a process between any two changes of a
// run directory; f must be quick and safe for concurrent use.
func ObserveChanges(f func(path string)) {
	if f == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&f)
}

// Changed reports a change made outside this package (code that renames
// local directories with package os, such as the checkpoint writer) to the
// function ObserveChanges set, if any.
func Changed(path string) {
	if f := observer.Load(); f != nil {
		(*f)(path)
	}
}
