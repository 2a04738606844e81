package promptsource

import (
	"fmt"
	"reflect"

	"github.com/aipo-rl/aipo/tasks"
)

// FillGenerated gives each entry of a kind that generates its prompts
// the kind's default task settings and split where they are unset: the
// Fill of such a kind.
func FillGenerated(ss List, task tasks.Settings, split string) {
	for i := range ss {
		if ss[i].Task == "" {
			ss[i].Task = task
		}
		if ss[i].Split == "" {
			ss[i].Split = split
		}
	}
}

// CheckGenerated checks what every kind that generates its prompts asks
// of its entries: one entry, which sets none of a prompt file's fields.
// kind names the kind, what the prompts it generates ("puzzles"), and
// hint, when not empty, ends the second error with what else the user
// may have meant.
func CheckGenerated(ss List, kind, what, hint string) error {
	if len(ss) > 1 {
		return fmt.Errorf("data.sources[1]: a second %s source: the %s task is one source; list it once", kind, kind)
	}
	if !reflect.ValueOf(ss[0].Source).IsZero() {
		msg := fmt.Sprintf("data.sources[0]: a %s source generates its %s and reads no file: remove path, format, preset, fields and data_source", kind, what)
		if hint != "" {
			msg += " (" + hint + ")"
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}
