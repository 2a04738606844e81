package samples

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
)

// WithVersions gives every token its lag behind the step's checkpoint and
// counts the trained policy tokens by version and lag; a row without
// token versions (schema 1) is one version throughout; a version newer
// than the checkpoint is refused.
func TestWithVersions(t *testing.T) {
	p, v := schemas.SourcePolicy, schemas.SourceVerify
	row := func(id string, pv int64, src []int8, tv []int64) schemas.Trajectory {
		ids := make([]int32, len(src))
		lp := make([]float32, len(src))
		for i := range src {
			if src[i] == p {
				lp[i] = -1
			}
		}
		return schemas.Trajectory{SchemaVersion: schemas.SchemaVersion, PromptID: id, PolicyVersion: pv, PromptIDs: []int32{1},
			ResponseIDs: ids, TokenSource: src, BehaviorLogProbs: lp, TokenPolicyVersion: tv, FinishReason: sampling.FinishEOS}
	}
	trajs := []schemas.Trajectory{
		row("a", 4, []int8{p, p, v, p, p}, []int64{4, 4, 4, 5, 5}), // continued across a push: lags 1,1,(1),0,0
		row("b", 5, []int8{p, p}, nil),                             // one version, schema-1 style: lag 0
		row("c", 3, []int8{p}, []int64{3}),                         // lag 2
		{SchemaVersion: schemas.SchemaVersion, PromptID: "d", FinishReason: schemas.FinishError},
	}
	batch, _, err := Of(trajs, "untrained")
	if err != nil {
		t.Fatal(err)
	}
	st, err := WithVersions(5, trajs, batch)
	if err != nil {
		t.Fatal(err)
	}
	wantLags := [][]int32{{1, 1, 1, 0, 0}, {0, 0}, {2}}
	for i, want := range wantLags {
		if got := batch[i].Lag; len(got) != len(want) || string(int32s(got)) != string(int32s(want)) {
			t.Errorf("sample %d: lags %v, want %v", i, got, want)
		}
	}
	if st.Versions["3"] != 1 || st.Versions["4"] != 2 || st.Versions["5"] != 4 || len(st.Versions) != 3 {
		t.Errorf("versions %v, want 3:1 4:2 5:4", st.Versions)
	}
	if st.Tokens["0"] != 4 || st.Tokens["1"] != 2 || st.Tokens["2"] != 1 {
		t.Errorf("tokens by lag %v, want 0:4 1:2 2:1", st.Tokens)
	}
	if st.Samples["1"] != 1 || st.Samples["0"] != 1 || st.Samples["2"] != 1 || st.Mixed != 1 || st.MaxLag != 2 {
		t.Errorf("samples by lag %v, mixed %d, max lag %d; want one each at 0, 1, 2, one mixed, max 2", st.Samples, st.Mixed, st.MaxLag)
	}
	if want := 4.0 / 7; st.MeanLag < want-1e-12 || st.MeanLag > want+1e-12 {
		t.Errorf("mean lag %v, want %v", st.MeanLag, want)
	}
	if _, err := WithVersions(4, trajs, batch); err == nil || !strings.Contains(err.Error(), "newer than the checkpoint 4") {
		t.Errorf("step 4 with version-5 tokens: %v, want a refusal naming the newer version", err)
	}
}

func int32s(v []int32) []rune {
	out := make([]rune, len(v))
	for i, x := range v {
		out[i] = rune(x)
	}
	return out
}
