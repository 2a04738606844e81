package tokenizer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/builtin from Builtin()")

// TestBuiltinGolden keeps testdata/builtin (read by the Hugging Face
// reference script) equal to what Builtin writes.
func TestBuiltinGolden(t *testing.T) {
	dir := filepath.Join("testdata", "builtin")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Builtin().SaveDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		name string
		got  func() ([]byte, error)
	}{{"tokenizer.json", Builtin().Marshal}, {"tokenizer_config.json", Builtin().MarshalConfig}} {
		got, err := f.got()
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		want, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatalf("%v (run go test -run TestBuiltinGolden -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Builtin() writes a %s that differs from testdata/builtin/%s (%d vs %d bytes): rerun with -update and regenerate the reference fixture", f.name, f.name, len(got), len(want))
		}
	}
}

func TestBuiltinLayout(t *testing.T) {
	tok := Builtin()
	if got := tok.VocabSize(); got != BuiltinVocabSize {
		t.Fatalf("VocabSize = %d, want %d", got, BuiltinVocabSize)
	}
	for name, want := range map[string]int{BuiltinPAD: 256, BuiltinBOS: 257, BuiltinEOS: 258, BuiltinImStart: 259, BuiltinImEnd: 260, "<verify>": 261, "</result>": 268} {
		if got, ok := tok.ID(name); !ok || got != want {
			t.Errorf("ID(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	if tok.BOS() != 257 || tok.EOS() != 258 || tok.PAD() != 256 {
		t.Errorf("BOS, EOS, PAD = %d, %d, %d; want 257, 258, 256", tok.BOS(), tok.EOS(), tok.PAD())
	}
	if !slices.Equal(tok.StopIDs(), []int{260, 258}) {
		t.Errorf("StopIDs = %v, want [260 258] (<|im_end|>, <|eos|>)", tok.StopIDs())
	}
	text := "Zoë: 2+2=4 🦙\n"
	ids := tok.Encode(text)
	if len(ids) != len(text) {
		t.Fatalf("Encode(%q) gave %d ids, want one per byte (%d)", text, len(ids), len(text))
	}
	for i, id := range ids {
		if id != int(text[i]) {
			t.Fatalf("Encode(%q)[%d] = %d, want the byte value %d", text, i, id, text[i])
		}
	}
	sp := tok.EncodeSpecial("<verify>2+2=4</verify><|eos|>")
	want := append(append([]int{261}, tok.Encode("2+2=4")...), 262, 258)
	if !slices.Equal(sp, want) {
		t.Errorf("EncodeSpecial with agent tags = %v, want %v", sp, want)
	}
	plain := tok.Encode("<verify>2+2=4</verify><|eos|>")
	for _, id := range plain {
		if id >= builtinByteSize {
			t.Fatalf("Encode (special parsing off) produced added token %d in %v", id, plain)
		}
	}
	back, err := tok.Decode(sp, true)
	if err != nil || back != "<verify>2+2=4</verify>" {
		t.Errorf("Decode(skipSpecial) = %q, %v; want the agent tags kept and <|eos|> dropped", back, err)
	}
}

// TestSaveLoadRoundTrip writes the built-in vocabulary as a checkpoint's
// tokenizer files and reads it back through Load.
func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := Builtin().SaveDir(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	msgs := []Message{{Role: "system", Content: "Use tools."}, {Role: "user", Content: "What is 6*7? <|im_end|>"}}
	a, err := Builtin().ApplyChat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tok.ApplyChat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Fatalf("ApplyChat differs after SaveDir/Load:\n%v\n%v", a, b)
	}
	if tok.BOS() != Builtin().BOS() || tok.EOS() != Builtin().EOS() || tok.PAD() != Builtin().PAD() || tok.VocabSize() != BuiltinVocabSize {
		t.Fatalf("reloaded BOS/EOS/PAD/size = %d/%d/%d/%d", tok.BOS(), tok.EOS(), tok.PAD(), tok.VocabSize())
	}
	again, err := tok.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := Builtin().Marshal()
	if !bytes.Equal(again, orig) {
		t.Fatalf("Marshal after Load differs from the original (%d vs %d bytes)", len(again), len(orig))
	}
	cfg, _ := tok.MarshalConfig()
	origCfg, _ := Builtin().MarshalConfig()
	if !bytes.Equal(cfg, origCfg) {
		t.Fatalf("MarshalConfig after Load differs:\n%s\n%s", cfg, origCfg)
	}
}
