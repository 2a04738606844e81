package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/model"
)

var peakLine = regexp.MustCompile(`rank (\d+) device peak (\d+)`)

// TestDeviceZero3 runs ZeRO stage 3 on the devices (backend.DeviceSharded:
// the passes' model sharded, its units gathered and its gradients reduced
// over the stand-in NCCL, AdamW on each rank's elements on the device) on
// a tiny Qwen3 with Qwen3's vocabulary of 151,936 tokens, so that the
// embedding (tied to the head) is 19 vocabulary blocks, each a unit: 3
// steps at 1, 2 and 4 ranks give the same bits. The model is 8 wide
// (dpQwen3): the emulator's time goes with the rank's elements, nearly
// all of them the vocabulary's rows, and the blocks are as many at any
// width.
//
// At 4 ranks each rank's device memory, as the stand-in driver counts
// its allocations from the group's opening on (MemStats' peak: the
// rank's weights, reduced gradient and moments, the rounds' sums, the
// unit buffers and the passes' activations), is at most 0.4 of one
// process's training state (16 bytes a parameter) plus the largest unit.
func TestDeviceZero3(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	q, z3 := "AIPO_DPD_QWEN3=1", "AIPO_DPD_ZERO=3"
	one, _, _, _ := dpDeviceRunAll(t, 1, Name, "", q, z3)
	for _, size := range []int{2, 4} {
		got, _, outs, _ := dpDeviceRunAll(t, size, Name, "", q, z3)
		if d := maxDiff(got, one); d != 0 {
			t.Errorf("stage 3 at %d ranks on the devices differs from 1 by up to %g; want the same bits", size, d)
		}
		if size != 4 {
			continue
		}
		cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
		if err != nil {
			t.Fatal(err)
		}
		cfg = dpQwen3(cfg)
		whole := 16 * model.ParamCount(cfg)
		var unit int64
		for _, u := range model.UnitsOf(cfg) {
			unit = max(unit, 4*int64(u.Len))
		}
		bound := 4*whole/10 + unit
		for r, out := range outs {
			m := peakLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("rank %d reported no device peak:\n%s", r, out)
			}
			peak, _ := strconv.ParseInt(m[2], 10, 64)
			t.Logf("rank %d of 4 at stage 3: device peak %.3f of one process's training state (%d bytes); largest unit %.4f; bound %.3f",
				r, float64(peak)/float64(whole), whole, float64(unit)/float64(whole), float64(bound)/float64(whole))
			if peak > bound {
				t.Errorf("rank %d held %d bytes of device memory at its peak, more than %s", r, peak, fmt.Sprintf("0.4 x %d + %d = %d", whole, unit, bound))
			}
		}
	}
}

// TestDeviceZero3Resume saves a stage-3 group on the devices at 4 ranks
// after 2 steps (the ranks' parts of the optimiser state, brought from
// the devices, in the layout the host's stage 3 writes, and the weights
// gathered whole) and resumes it at 2 and at 1 rank for the third step:
// the weights and the gathered optimiser state have the sha256 of 3
// uninterrupted steps at 1 rank. The tiny Qwen2 fixture (a vocabulary of
// 97, one block) serves: what is saved and read is laid out by units and
// owners whatever the vocabulary, and the small head keeps the 5 runs
// cheap on the emulator.
func TestDeviceZero3Resume(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	z3 := "AIPO_DPD_ZERO=3"
	whole, _, _, wdir := dpDeviceRunAll(t, 1, Name, "", z3)
	saved := t.TempDir()
	dpDeviceRunAll(t, 4, Name, "", z3, "AIPO_DPD_STEPS=2", "AIPO_DPD_SAVE="+saved)
	for _, n := range []int{2, 1} {
		got, _, _, dir := dpDeviceRunAll(t, n, Name, "", z3, "AIPO_DPD_FIRST=2", "AIPO_DPD_STEPS=3", "AIPO_DPD_LOAD="+saved)
		if d := maxDiff(got, whole); d != 0 {
			t.Errorf("saved at 4 ranks, resumed at %d: the weights differ from 3 uninterrupted steps by up to %g; want the same bits", n, d)
		}
		if a, b := fileDigest(t, dir, "optimizer.bin"), fileDigest(t, wdir, "optimizer.bin"); a != b {
			t.Errorf("saved at 4 ranks, resumed at %d: the optimiser state's sha256 %s, uninterrupted %s", n, a, b)
		}
	}
}

// fileDigest is the sha256 of a saved file, in hex.
func fileDigest(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// dpQwen3 is the fixture cfg made a tiny Qwen3 (its q/k norm, tied head)
// with Qwen3's vocabulary, 19 blocks of it at ZeRO stage 3, and a hidden
// size of 8: the emulator runs every elementwise kernel over the
// rank's elements (the sums, AdamW) one emulated thread an element, and
// the vocabulary's rows are nearly all of them, so the width sets the
// test's time; the blocks are as many at any width.
func dpQwen3(cfg model.Config) model.Config {
	cfg.ModelType, cfg.HeadDim, cfg.VocabSize = "qwen3", 8, 151936
	cfg.HiddenSize, cfg.IntermediateSize = 8, 16
	return cfg
}
