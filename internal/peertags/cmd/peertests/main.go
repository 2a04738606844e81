// Command peertests prints what the peer tests of a build tag are, for
// make test-TAG (scripts/test-peer.sh) and make test:
//
//	peertests tags   the peer tags, comma-separated (go test -tags)
//	peertests TAG    one line per package holding tests of TAG:
//	                 ./DIR <tab> -run pattern <tab> -bench pattern
//
// A pattern is empty when the package has no such tests. It reads the
// module in the working directory (-root to name another); the tags and
// what each needs are in package peertags.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/aipo-rl/aipo/internal/peertags"
)

func main() {
	root := flag.String("root", ".", "the module's `directory`")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: peertests [-root DIR] tags|TAG\ntags: %s\n", strings.Join(peertags.Names(), ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	arg := flag.Arg(0)
	if arg == "tags" {
		fmt.Println(strings.Join(peertags.Names(), ","))
		return
	}
	if _, ok := peertags.Lookup(arg); !ok {
		fmt.Fprintf(os.Stderr, "peertests: %q is not a peer tag; the tags: %s\n", arg, strings.Join(peertags.Names(), ", "))
		os.Exit(2)
	}
	m, err := peertags.Scan(*root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "peertests: %v\n", err)
		os.Exit(1)
	}
	pkgs := m.Tests(arg)
	if len(pkgs) == 0 {
		fmt.Fprintf(os.Stderr, "peertests: no test file of the module has the tag %s\n", arg)
		os.Exit(1)
	}
	for _, p := range pkgs {
		fmt.Printf("%s\t%s\t%s\n", p.Pkg(), p.Run(), p.Bench())
	}
}
