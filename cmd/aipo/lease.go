package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aipo-rl/aipo/internal/runlease"
)

// leaseFlags adds --take-over and --lease-timeout to fs and returns the
// lease options they give (read after fs.Parse).
func leaseFlags(fs *flag.FlagSet, command string) func() runlease.Options {
	takeOver := fs.Bool("take-over", false, "take the run directory's lease even if its holder looks alive (only when that writer is gone: two writers on one run directory lose data)")
	timeout := fs.Duration("lease-timeout", runlease.DefaultTimeout, "how long the run directory's lease ("+runlease.Name+") lives without renewal; a writer that stops renewing for this long (its machine died) is taken over by the next start")
	return func() runlease.Options {
		return runlease.Options{TakeOver: *takeOver, Timeout: *timeout, Command: command,
			Log: func(s string) { fmt.Fprintln(os.Stderr, "aipo: "+s) }}
	}
}

// checkLeaseTimeout refuses a lease timeout too short to be renewed.
func checkLeaseTimeout(o runlease.Options) error {
	if o.Timeout < 4*time.Second {
		return fmt.Errorf("--lease-timeout %s is too short: the lease is renewed every quarter of it; give at least 4s", o.Timeout)
	}
	return nil
}
