package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestTokenizeRoundTrip(t *testing.T) {
	text := "Hello <verify>x</verify> 🦙\n"
	var ids, errb bytes.Buffer
	if rc := runTokenize([]string{"--tokenizer", "builtin", "--special"}, strings.NewReader(text), &ids, &errb); rc != 0 {
		t.Fatalf("encode exit %d: %s", rc, errb.String())
	}
	line := ids.String()
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 || !strings.Contains(line, " 261 ") {
		t.Fatalf("encode printed %q: want one line of ids holding <verify> (261)", line)
	}
	var out bytes.Buffer
	if rc := runTokenize([]string{"--tokenizer", "builtin", "--decode"}, strings.NewReader(line), &out, &errb); rc != 0 {
		t.Fatalf("decode exit %d: %s", rc, errb.String())
	}
	if out.String() != text {
		t.Fatalf("decode printed %q, want %q", out.String(), text)
	}
}

func TestTokenizeErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runTokenize(nil, strings.NewReader(""), &out, &errb); rc != 2 || !strings.Contains(errb.String(), "--tokenizer") {
		t.Errorf("no --tokenizer: exit %d, stderr %q", rc, errb.String())
	}
	errb.Reset()
	if rc := runTokenize([]string{"--tokenizer", "builtin", "--decode"}, strings.NewReader("1 two"), &out, &errb); rc != 1 || !strings.Contains(errb.String(), `"two"`) {
		t.Errorf("bad id: exit %d, stderr %q", rc, errb.String())
	}
	errb.Reset()
	if rc := runTokenize([]string{"--tokenizer", "builtin", "--decode"}, strings.NewReader("[1, 99999]"), &out, &errb); rc != 1 || !strings.Contains(errb.String(), "99999") {
		t.Errorf("unknown id: exit %d, stderr %q", rc, errb.String())
	}
	errb.Reset()
	if rc := runTokenize([]string{"--tokenizer", "/nonexistent/tokenizer.json"}, strings.NewReader("x"), &out, &errb); rc != 1 || !strings.Contains(errb.String(), "/nonexistent/tokenizer.json") {
		t.Errorf("missing file: exit %d, stderr %q", rc, errb.String())
	}
}
