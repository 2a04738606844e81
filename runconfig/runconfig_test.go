package runconfig

import (
	"context"
	"github.com/aipo-rl/aipo/tasks/demo"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/loss"
)

// fieldPaths lists the dotted YAML paths of every field under t, with []
// after list fields and ROLE for the collaborator roles.
func fieldPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")
		if len(tag) > 1 && slices.Contains(tag[1:], "inline") {
			fieldPaths(f.Type, prefix, out)
			continue
		}
		name := tag[0]
		if name == "" || name == "-" {
			continue
		}
		p := prefix + name
		if p == "collaborators.verify" || p == "collaborators.knowledge" || p == "collaborators.reason" {
			p = "collaborators.ROLE"
		}
		if p == "rollout.guidance.teacher" {
			// A collaborator role: its fields are listed under
			// collaborators.ROLE.
			*out = append(*out, p)
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			p += "[]"
			ft = ft.Elem()
		}
		*out = append(*out, p)
		fieldPaths(ft, p+".", out)
	}
}

// TestReferenceComplete checks that the package doc's reference lists
// every field of Config, and nothing that is not one.
func TestReferenceComplete(t *testing.T) {
	var paths []string
	fieldPaths(reflect.TypeOf(Config{}), "", &paths)
	want := map[string]bool{}
	for _, p := range paths {
		want[strings.TrimSuffix(p, "[]")] = true
		want[p] = true
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^//\t([a-z_]+(?:\.[A-Za-z0-9_\[\]]+)*)\s`)
	listed := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
		if !want[m[1]] {
			t.Errorf("doc.go lists %q, which is not a field of Config", m[1])
		}
	}
	for _, p := range paths {
		if !strings.Contains(p, ".") && p != "collaborators" {
			continue // a section: its fields are listed
		}
		if !listed[p] && !listed[strings.TrimSuffix(p, "[]")] {
			t.Errorf("field %s is missing from the reference in doc.go", p)
		}
	}
}

func TestDefaultsAndFill(t *testing.T) {
	c, err := Parse([]byte("run: {dir: runs/x}\ndata: {demo: true}\n"), "t.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Run.Name != "x" || c.Rollout.GroupSize != 8 || c.Rollout.MaxInteractions != 3 || c.Data.BatchSize != 32 ||
		c.Rollout.OpenerBy != "system" || c.Rollout.TemplateTokens != "untrained" || c.Policy.Temperature != 1 || c.Learner.Loss.Omega != 0.2 {
		t.Errorf("defaults not filled: %+v", c)
	}
	if len(c.Collaborators.Roles()) != 3 {
		t.Errorf("demo collaborators not filled: %+v", c.Collaborators)
	}
	if c.Collaborators.Knowledge.Noise.P(0) != demo.Noise {
		t.Errorf("demo knowledge noise %v, want %v", c.Collaborators.Knowledge.Noise.P(0), demo.Noise)
	}
	if !reflect.DeepEqual(c.Eval.Splits, []string{"seen", "unseen"}) || c.Eval.MaxResponseTokens != c.Policy.MaxResponseTokens {
		t.Errorf("eval defaults: %+v", c.Eval)
	}
	if c.Data.DeadLetterDir != "runs/x/dead_letters" || c.DeadLetterPath(7) != "runs/x/dead_letters/step-000007.jsonl" {
		t.Errorf("dead letters at %q / %q", c.Data.DeadLetterDir, c.DeadLetterPath(7))
	}
	if c.Rollout.FailedFractionBound() != DefaultMaxFailedFraction {
		t.Errorf("rollout.max_failed_fraction unset gives %v, want %v", c.Rollout.FailedFractionBound(), DefaultMaxFailedFraction)
	}
	// An explicit zero is kept, not replaced by the default.
	c, err = Parse([]byte("run: {dir: r}\ndata: {demo: true}\nrollout: {max_interactions: 0, max_failed_fraction: 0}\npolicy: {temperature: 0}\n"), "t.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Rollout.MaxInteractions != 0 || c.Policy.Temperature != 0 || c.Rollout.FailedFractionBound() != 0 {
		t.Errorf("explicit zeros replaced: max_interactions %d temperature %v max_failed_fraction %v", c.Rollout.MaxInteractions, c.Policy.Temperature, c.Rollout.FailedFractionBound())
	}
	d := c
	d.Fill()
	if d.Hash() != c.Hash() {
		t.Error("Fill is not idempotent (hash changed)")
	}
	d.Policy.Endpoint = "grpc://127.0.0.1:1"
	if d.Hash() != c.Hash() {
		t.Error("the hash depends on policy.endpoint")
	}
	d.Rollout.GroupSize = 4
	if d.Hash() == c.Hash() {
		t.Error("the hash ignores rollout.group_size")
	}
}

// learner.loss.rollout_correction is off by default; a level turns it on
// with the default cap and mode, each of which can be set.
func TestRolloutCorrectionConfig(t *testing.T) {
	c, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\n"), "t.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if rc := c.Learner.Loss.RolloutCorrection; rc.On() || rc != (loss.RolloutCorrection{Level: "off", Cap: 2, Mode: "truncate"}) {
		t.Errorf("default rollout_correction %+v, want off with cap 2 and mode truncate", rc)
	}
	for yaml, want := range map[string]loss.RolloutCorrection{
		"{level: token}":                        {Level: "token", Cap: 2, Mode: "truncate"},
		"{level: sequence, cap: 5, mode: mask}": {Level: "sequence", Cap: 5, Mode: "mask"},
		"{level: geometric, cap: 1.001}":        {Level: "geometric", Cap: 1.001, Mode: "truncate"},
		"{level: off, cap: 3, mode: mask}":      {Level: "off", Cap: 3, Mode: "mask"},
	} {
		c, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: "+yaml+"}}\n"), "t.yaml", "")
		if err != nil {
			t.Errorf("%s: %v", yaml, err)
			continue
		}
		if got := c.Learner.Loss.RolloutCorrection; got != want {
			t.Errorf("%s: %+v, want %+v", yaml, got, want)
		}
	}
}

func TestRejects(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {group_sise: 8}\n", "group_sise"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {omegа: 1}}\n", "omeg"},
		{"data: {demo: true}\n", "run.dir"},
		{"run: {dir: r}\n", "data.sources"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {group_size: 1}\n", "rollout.group_size"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {opener_by: agent}\n", "rollout.opener_by"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {template_tokens: trained}\n", "rollout.template_tokens"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {interaction_cost: -1}\n", "rollout.interaction_cost"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {max_failed_fraction: 1.5}\n", "rollout.max_failed_fraction"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {max_failed_fraction: -0.1}\n", "must be between 0"},
		{"run: {dir: r}\ndata: {demo: true}\nrollout: {partial: true}\n", "rollout.partial: needs run.async: true"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial_tokens: 4}\n", "rollout.partial_tokens: needs rollout.partial: true"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true, partial_tokens: -1}\n", "rollout.partial_tokens: -1 must not be negative"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true, partial_tokens: 4}\npolicy: {endpoint: 'grpc://127.0.0.1:7070', sync: {kind: aipo}}\n", "rollout.partial_tokens: needs the in-process policy"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\npolicy: {endpoint: 'http://127.0.0.1:8000/v1?model=m', sync: {kind: sglang}}\n", "rollout.partial: is not built for SGLang"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\npolicy: {endpoint: 'http://127.0.0.1:8000/v1?model=m'}\n", "rollout.partial: needs policy.sync.kind: aipo"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\npolicy: {endpoint: 'http://127.0.0.1:8000/v1?model=m', sync: {kind: vllm, endpoints: ['http://127.0.0.1:8001', 'http://127.0.0.1:8002']}}\n", "needs one vLLM (policy.sync.endpoints has 2)"},
		{"run: {dir: r}\ndata: {demo: true}\npolicy: {top_p: 0}\n", "policy.top_p"},
		{"run: {dir: r}\ndata: {demo: true}\npolicy: {endpoint: 'no scheme'}\n", "policy.endpoint"},
		{"run: {dir: r}\ndata: {demo: true}\nreward: {data_source: nosuch}\n", "reward.data_source"},
		{"run: {dir: r}\ndata: {demo: true}\nadvantage: {method: ppo}\n", "advantage"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {backend: tpu}\n", "learner.backend"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {backend: tpu}\n", "is unknown: use cpu or cuda"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {zero: 4}\n", "learner.zero: 4 is not a ZeRO stage the learner has: use 1"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {precision: fp8}\n", "is unknown: use fp32 or bf16"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {precision: bfloat16}\n", "learner.precision: \"bfloat16\" is unknown: use fp32 or bf16"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {objective: sft}\n", "learner.objective"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {activation_checkpointing: offload}\n", "learner.activation_checkpointing: offload keeps each layer's input in host memory instead of a GPU's, which the cpu backend's passes do not use (learner.backend: cuda does): give on"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {activation_checkpointing: always}\n", "learner.activation_checkpointing: \"always\" is unknown: use auto, on, off or offload"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {keep_gathered_mib: -1}\n", "learner.keep_gathered_mib: -1 must not be negative (0 keeps no gathered weights between passes)"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {keep_gathered_mib: 64}\n", "learner.keep_gathered_mib: 64 keeps gathered weights between the passes of ZeRO stage 3; learner.zero is 1, which gathers none: give learner.zero: 3 or remove it"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {keep_gathered_mib: 64, zero: 3, lora: {rank: 8}}\n", "learner.keep_gathered_mib: 64 keeps the policy's gathered weights; a LoRA run's stage 3 gathers its frozen base, which it does not keep: remove it"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {optim: {lr: -1}}\n", "learner.optim"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {level: seq}}}\n", "learner.loss.rollout_correction.level: \"seq\" is unknown: use off, token, sequence"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {level: \"\"}}}\n", "learner.loss.rollout_correction.level"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {level: token, cap: 1}}}\n", "learner.loss.rollout_correction.cap: 1 must be finite and > 1"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {level: geometric, cap: .inf}}}\n", "learner.loss.rollout_correction.cap: +Inf"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {level: token, mode: clip}}}\n", "learner.loss.rollout_correction.mode: \"clip\" is unknown: use truncate"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {levels: token}}}\n", "levels"},
		{"run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {rollout_correction: {mode: clip}}}\n", "learner.loss.rollout_correction.mode"},
		{"run: {dir: r}\ndata: {demo: true}\neval: {splits: [held]}\n", "eval.splits[0]"},
		{"run: {dir: r}\ndata: {demo: true}\ncollaborators: {knowledge: {kind: openai}}\n", "collaborators"},
		{"run: {dir: r}\ndata: {sources: [{path: /nonexistent/p.jsonl, data_source: math}]}\n", "data.sources[0].path"},
		{"run: {dir: r}\ndata: {demo: true, demo_task: {seed: 1}}\n", "data.sources[0].task"},
		{"run: {dir: r}\ndata: {demo: true}\n---\nrun: {dir: s}\n", "more than one"},
	} {
		_, err := Parse([]byte(c.yaml), "t.yaml", "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", c.yaml, err, c.want)
		}
	}
}

// learner.precision: fp32 unless set; bf16 on the cpu backend (its
// bfloat16 products, model.SetComputeBF16) as on cuda.
func TestLearnerPrecision(t *testing.T) {
	for yaml, want := range map[string]string{"{}": PrecisionFP32, "{precision: fp32}": PrecisionFP32, "{precision: bf16}": PrecisionBF16, "{precision: bf16, backend: cpu}": PrecisionBF16} {
		c, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: "+yaml+"\n"), "t.yaml", "")
		if err != nil {
			t.Errorf("learner: %s: %v", yaml, err)
			continue
		}
		if c.Learner.Precision != want {
			t.Errorf("learner: %s: precision %q, want %q", yaml, c.Learner.Precision, want)
		}
	}
}

// TestExampleConfigs loads the example run configurations under configs/.
func TestExampleConfigs(t *testing.T) {
	var files []string
	for _, name := range []string{"demo.yaml", "quick.yaml", "math.yaml", "math-local.yaml"} {
		files = append(files, filepath.Join("..", "configs", name))
	}
	for _, f := range files {
		c, err := Load(context.Background(), f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if c.Data.Sources.Label() == demo.Kind && c.Collaborators.Knowledge != nil && c.Collaborators.Knowledge.Kind != demo.KindCollaborators {
			t.Errorf("%s: the demo's knowledge agent is %q", f, c.Collaborators.Knowledge.Kind)
		}
	}
}

func TestRelativePaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.jsonl"), []byte(`{"problem":"1+1?","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sys.txt"), []byte("be brief"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgText := "run: {dir: out}\ndata: {sources: [{path: p.jsonl, data_source: integer}]}\nrollout: {system_prompt_file: sys.txt}\n"
	p := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(p, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Data.Sources[0].Path != filepath.Join(dir, "p.jsonl") {
		t.Errorf("source path %q, want it resolved against the config's directory", c.Data.Sources[0].Path)
	}
	if s, err := c.SystemPrompt(context.Background()); err != nil || s != "be brief" {
		t.Errorf("system prompt %q, %v", s, err)
	}
	if c.Run.Dir != "out" {
		t.Errorf("run.dir %q, want it as written (relative to the working directory)", c.Run.Dir)
	}
}

// rollout.partial is accepted where it is built: an asynchronous run that
// pushes every checkpoint to aipo serve or vLLM, or samples in process.
func TestPartialAccepted(t *testing.T) {
	c, err := Parse([]byte("run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\npolicy: {endpoint: 'grpc://127.0.0.1:7070', sync: {kind: aipo}}\n"), "t.yaml", "")
	if err != nil {
		t.Fatalf("rollout.partial with run.async and policy.sync kind aipo: %v", err)
	}
	if !c.Rollout.Partial || c.Staleness() != 1 {
		t.Errorf("rollout.partial %v, staleness %d; want true, 1", c.Rollout.Partial, c.Staleness())
	}
	if _, err := Parse([]byte("run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\n"), "t.yaml", ""); err != nil {
		t.Errorf("rollout.partial with the in-process policy: %v", err)
	}
	if c, err := Parse([]byte("run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true, partial_tokens: 4}\n"), "t.yaml", ""); err != nil || c.Rollout.PartialTokens != 4 {
		t.Errorf("rollout.partial_tokens 4 with the in-process policy: %v (read %d)", err, c.Rollout.PartialTokens)
	}
	if _, err := Parse([]byte("run: {dir: r, async: true}\ndata: {demo: true}\nrollout: {partial: true}\npolicy: {endpoint: 'http://127.0.0.1:8000/v1?model=m', sync: {kind: vllm, endpoints: ['http://127.0.0.1:8000']}}\n"), "t.yaml", ""); err != nil {
		t.Errorf("rollout.partial with policy.sync kind vllm: %v", err)
	}
}
