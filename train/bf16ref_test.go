//go:build shareddata

package train

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/plan"
	"github.com/aipo-rl/aipo/runconfig"
)

// The path a user walks with a bfloat16 Hugging Face release: a tiny
// Qwen3-architecture directory in bfloat16 with the real Qwen3 tokenizer,
// seeded as checkpoint 0 of a run whose loss has a KL term. The learner's
// reference (checkpoint 0, from the float32 masters beside the bfloat16
// weights) is held in bfloat16 on the CPU, and at step 0, where the
// policy is the reference, the two score a chat-formatted prompt the same
// to the bit; aipo plan counts the reference at 2 bytes a parameter.
func TestBF16ReferenceFromAHuggingFaceDirectory(t *testing.T) {
	ctx := context.Background()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hfDir, runDir := filepath.Join(dir, "hf"), filepath.Join(dir, "run")
	cfgJSON := strings.Replace(hfmodel.TinyQwen3Config, `"torch_dtype": "float32"`, `"torch_dtype": "bfloat16"`, 1)
	if err := hfmodel.WriteDir(hfDir, []byte(cfgJSON), 5, checkpoint.BF16, tokDir); err != nil {
		t.Fatal(err)
	}
	if err := SeedCheckpoint(ctx, hfDir, runDir); err != nil {
		t.Fatal(err)
	}
	cfg, err := runconfig.Parse([]byte("run: {name: bf16ref, dir: "+runDir+", steps: 1}\ndata: {demo: true}\nlearner: {loss: {kl_coef: 0.001}}\n"), "bf16ref.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	s := newLearnSession(cfg, nil)
	defer s.Close()
	st, err := s.stateAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.learner(ctx, cfg, s.reference)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if l.Ref == nil || l.Ref.HeldInBF16() != model.HoldsBF16Exactly() {
		t.Fatalf("the reference of a run seeded from a bfloat16 directory: held in bfloat16 %v, want %v on these BLAS kernels", l.Ref != nil && l.Ref.HeldInBF16(), model.HoldsBF16Exactly())
	}
	ids := tok.EncodeSpecial("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n<verify>2+3=5</verify>\nSo the answer is \\boxed{5}.<|im_end|>")
	b := model.Batch{Tokens: make([]int32, len(ids))}
	for i, id := range ids {
		b.Tokens[i] = int32(id)
	}
	want, _, err := l.Policy.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := l.Ref.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("token %d (%d): the bfloat16-held reference gives %v, the policy at step 0 %v", i, ids[i], got[i], want[i])
		}
	}
	p, err := plan.Make(ctx, cfg, plan.Options{Baseline: 128 << 20, HostBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ln := range p.Phases[0].Lines {
		if strings.HasPrefix(ln.What, "reference policy") {
			found = true
			want := int64(2) // bytes a parameter
			if !model.HoldsBF16Exactly() {
				want = 4
			}
			if ln.Host != want*p.Params || strings.Contains(ln.What, "bfloat16") != (want == 2) {
				t.Errorf("plan: %q %d bytes, want %d bytes a parameter (%d)", ln.What, ln.Host, want, want*p.Params)
			}
		}
	}
	if !found {
		t.Errorf("plan: no reference line in the learner step: %+v", p.Phases[0].Lines)
	}
}
