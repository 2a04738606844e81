package loss

import (
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// -update rewrites what testtools.GeneratedSection checks.
var _ = flag.Bool("update", false, "rewrite the generated sections of docs/algorithms.md from the code")

// TestBaseTableDocumented checks that docs/algorithms.md holds the table
// BaseTable generates (-update rewrites it).
func TestBaseTableDocumented(t *testing.T) {
	testtools.GeneratedSection(t, "docs/algorithms.md", "bases", BaseTable())
}

// TestBasesTable checks the table of bases: names unique and listed by
// the errors that reject an unknown one, every surrogate's fields real
// yaml fields of Config, every base's preset valid, and every base held to
// veRL.
func TestBasesTable(t *testing.T) {
	yamlFields := map[string]bool{}
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		yamlFields[strings.Split(ct.Field(i).Tag.Get("yaml"), ",")[0]] = true
	}
	seen := map[string]bool{}
	for _, b := range bases {
		if b.name == "" || seen[b.name] || b.doc == "" || b.surrogate.doc == "" || b.surrogate.term == nil {
			t.Errorf("base %q: a name used once, a doc line and a surrogate with its doc and term are required: %+v", b.name, b)
		}
		seen[b.name] = true
		for _, f := range b.surrogate.reads {
			if !yamlFields[f] {
				t.Errorf("base %s: its surrogate reads %q, which is no yaml field of Config", b.name, f)
			}
			if !BaseReads(b.name, f) {
				t.Errorf("BaseReads(%s, %s) = false", b.name, f)
			}
		}
		c, err := ConfigFor(b.name)
		if err != nil || c.Base != b.name {
			t.Fatalf("ConfigFor(%s) = %+v, %v", b.name, c, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("ConfigFor(%s): %v", b.name, err)
		}
	}
	if BaseReads("ppo2", "clip_low") {
		t.Error("BaseReads of an unknown base is true")
	}
	want := strings.Join(Bases(), ", ")
	_, err := ConfigFor("ppo2")
	bad := DefaultConfig()
	bad.Base = "ppo2"
	for _, err := range []error{err, bad.Validate()} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unknown base: error %v, want one listing %s", err, want)
		}
	}
}
