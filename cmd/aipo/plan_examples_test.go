package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// planExample is one of docs/scaling.md's plans of configs/math-bf16.yaml
// at the paper's sizes and beyond, on GPUs at ZeRO stage 3.
type planExample struct {
	model, device string
	// set are --set overrides of the file's keys.
	set          []string
	ranks, nodes int
	hostGiB      int // --host-gib, 0: not given
	// hostPeak is the node's host peak docs/scaling.md gives (GiB); the
	// plan's is within a quarter GiB of it (its process line is the
	// plan's own resident memory, four times on the node) and at most
	// hostGiB.
	hostPeak float64
	// fits is whether the learner's GPU fits; minFree the least share of
	// the GPU the plan must leave; short, for an example that does not
	// fit, the most GiB it may lack (what is missing: docs/scaling.md).
	fits    bool
	minFree float64
	short   float64
}

// args is the example's aipo plan command line, as docs/scaling.md
// writes it (from the repository's root).
func (e planExample) args() []string {
	a := []string{"plan", "--config", "configs/math-bf16.yaml"}
	for _, kv := range e.set {
		a = append(a, "--set", kv)
	}
	a = append(a, "--init", "learner/hfconfig/testdata/"+e.model+".config.json", "--device", e.device, "--nproc", strconv.Itoa(e.ranks))
	if e.nodes > 1 {
		a = append(a, "--nnodes", strconv.Itoa(e.nodes))
	}
	a = append(a, "--zero", "3")
	if e.hostGiB > 0 {
		a = append(a, "--host-gib", strconv.Itoa(e.hostGiB))
	}
	return a
}

// The five plans of docs/scaling.md ("The paper's sizes on GPUs"): the
// same commands run here, and their device peaks are the ones the page
// prints. Qwen2.5-7B-Instruct on 4 A100s, the KL term on, fits with at
// least 15% of each GPU left and at most 256 GiB of host memory for the
// node (--host-gib 256: the plan checks it), the page's figure; Qwen3-8B fits 8 H100s;
// Qwen2.5-32B fits 8 H200s with at least 5% of each left and its node's
// host in a DGX H200's 2 TB; Qwen2.5-72B-Instruct on 16 H200s does not fit
// (by 33.83 GiB a GPU: float32 activations of one 17,408-token sequence),
// and the test holds that it lacks no more than that, until its layers'
// kept inputs go to host memory (learner.activation_checkpointing:
// offload), when it fits with at least 10% of each GPU left.
func TestPlanPaperSizesOnGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	repo := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "scaling.md"))
	if err != nil {
		t.Fatal(err)
	}
	peak := regexp.MustCompile(`device peak ([0-9.]+) GiB of ([0-9.]+) GiB \([^)]*\): (fits|DOES NOT FIT), ([0-9.]+) GiB (to spare|short)`)
	hostPeak := regexp.MustCompile(`host peak ([0-9.]+) GiB`)
	for _, e := range []planExample{
		{model: "Qwen2.5-7B-Instruct", device: "a100-80g", ranks: 4, hostGiB: 256, hostPeak: 242.71, fits: true, minFree: 0.15},
		{model: "Qwen3-8B", device: "h100", ranks: 8, fits: true, minFree: 0.15},
		{model: "Qwen2.5-32B", device: "h200", ranks: 8, hostGiB: 2048, hostPeak: 1528.23, fits: true, minFree: 0.05},
		{model: "Qwen2.5-72B-Instruct", device: "h200", ranks: 16, nodes: 2, short: 34},
		{model: "Qwen2.5-72B-Instruct", device: "h200", set: []string{"learner.activation_checkpointing=offload"}, ranks: 16, nodes: 2, fits: true, minFree: 0.1},
	} {
		args := e.args()
		cmd := "aipo " + strings.Join(args, " ")
		if !strings.Contains(string(doc), cmd+"\n") {
			t.Errorf("docs/scaling.md does not give the command %q", cmd)
		}
		run := t.TempDir()
		// The page's commands plan the file's own run directory (a
		// bucket); the test's plans one of its own, which changes no
		// figure (no checkpoint 0 there: --init is read).
		for i := range args {
			if strings.HasPrefix(args[i], "configs/") || strings.HasPrefix(args[i], "learner/") {
				args[i] = filepath.Join(repo, args[i])
			}
		}
		code, out := runAipo(t, append(args, "--run", run)...)
		m := peak.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no device peak in the plan (exit %d):\n%s", cmd, code, out)
		}
		if !strings.Contains(string(doc), m[0]) {
			t.Errorf("docs/scaling.md does not print %s's device peak as the plan does: %q", e.model, m[0])
		}
		if !strings.Contains(out, "reference policy: rank 0's share (bfloat16") || !strings.Contains(out, "built in bfloat16 mixed precision") || strings.Contains(out, "NOT BUILT") {
			t.Errorf("%s: the plan does not hold the reference sharded in bfloat16, or does not say that stage 3 in bfloat16 is built on GPUs:\n%s", cmd, out)
		}
		need, _ := strconv.ParseFloat(m[1], 64)
		capacity, _ := strconv.ParseFloat(m[2], 64)
		by, _ := strconv.ParseFloat(m[4], 64)
		free := 1 - need/capacity
		t.Logf("%s: device peak %.2f GiB of %.2f GiB, %.1f%% left", cmd, need, capacity, 100*free)
		switch {
		case e.fits && (m[3] != "fits" || free < e.minFree):
			t.Errorf("%s: %s, %.1f%% of the GPU left; want it to fit with at least %.0f%% left", cmd, m[0], 100*free, 100*e.minFree)
		case !e.fits && (m[3] != "DOES NOT FIT" || by > e.short):
			t.Errorf("%s: %s; docs/scaling.md says it does not fit, by at most %.0f GiB", cmd, m[0], e.short)
		}
		if e.hostGiB > 0 {
			h := hostPeak.FindStringSubmatch(out)
			if h == nil {
				t.Fatalf("%s: no host peak:\n%s", cmd, out)
			}
			v, _ := strconv.ParseFloat(h[1], 64)
			if math.Abs(v-e.hostPeak) > 0.25 || !strings.Contains(string(doc), fmt.Sprintf("%.2f GiB", e.hostPeak)) {
				t.Errorf("%s: the node's host peak %.2f GiB; docs/scaling.md gives %.2f", cmd, v, e.hostPeak)
			}
			if v > float64(e.hostGiB) {
				t.Errorf("%s: the node's host peak %.2f GiB, more than %d GiB", cmd, v, e.hostGiB)
			}
		}
		if want := map[bool]int{true: 0, false: 1}[e.fits]; code != want {
			t.Errorf("%s exited %d, want %d:\n%s", cmd, code, want, out)
		}
	}
}
