package guidance

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// Validate names the field at fault, and the teacher's role takes the
// default system prompt and context when it sets none.
func TestValidateAndTeacherRole(t *testing.T) {
	teacher := &collab.RoleConfig{Kind: collab.KindOpenAI, Endpoint: "http://127.0.0.1:1/v1", Model: "m"}
	for _, tc := range []struct {
		g    Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{Source: SourceSolution, Traces: 1}, ""},
		{Config{Source: SourceTeacher, Traces: 2, Teacher: teacher}, ""},
		{Config{Traces: 1}, "source is empty"},
		{Config{Source: SourceSolution, Traces: 1, Teacher: teacher}, "set source: teacher"},
		{Config{Source: SourceTeacher, Traces: 1}, "no teacher is configured"},
		{Config{Source: "oracle", Traces: 1}, `"oracle" is unknown`},
		{Config{Source: SourceSolution}, "traces 0"},
		{Config{Source: SourceSolution, Traces: 4}, "traces 4 must leave the group of 4"},
	} {
		err := tc.g.Validate(4)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.g, err, tc.want)
		}
	}
	if !(Config{Source: SourceSolution}).On() || (Config{}).On() {
		t.Errorf("On: a set source is on, none is off")
	}
	if (Config{}).TeacherRole() != nil {
		t.Errorf("no teacher, a role")
	}
	r := Config{Source: SourceTeacher, Teacher: teacher}.TeacherRole()
	if r.System != DefaultTeacherSystem || r.Prompt != "{{.Problem}}" || r.Context != collab.ContextProblem || teacher.System != "" {
		t.Errorf("the teacher's role %+v, want the defaults on a copy", r)
	}
}
