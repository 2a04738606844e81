package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{
		name:    "version",
		summary: "print aipo's version, the commit it was built from and the Go toolchain",
		run:     runVersion,
	})
}

// versionText describes this build from the module and VCS facts the Go
// toolchain records in the binary.
func versionText() string {
	version, rev, when, dirty := "(devel)", "unknown", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	out := "aipo " + version + " commit " + rev
	if dirty {
		out += " (modified)"
	}
	if when != "" {
		out += " of " + when
	}
	return out + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

func runVersion(args []string) error {
	if len(args) > 0 && args[0] != "--help" && args[0] != "-h" {
		return usageError("unexpected arguments %v (it takes none)", args)
	}
	fmt.Println(versionText())
	return nil
}
