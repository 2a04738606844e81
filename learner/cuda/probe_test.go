package cuda

import (
	"os"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
)

// Probe reports the device the driver sees (the stand-in driver's: "fake
// CUDA device", 2 GiB of which 1 free), or, without a driver, the error
// naming the library it looked for.
func TestGPUProbe(t *testing.T) {
	info, err := Probe(0)
	if _, derr := Driver(); derr != nil {
		if err == nil || !strings.Contains(err.Error(), "libcuda") {
			t.Fatalf("no driver: Probe = %+v, %v; want an error naming libcuda", info, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if info.Name == "" || info.TotalBytes == 0 || info.FreeBytes > info.TotalBytes || info.Major < 8 {
		t.Fatalf("Probe = %+v", info)
	}
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") == "1" && (info.Name != "fake CUDA device" || info.TotalBytes != 2<<30 || info.FreeBytes != 1<<30) {
		t.Fatalf("the stand-in driver's device: Probe = %+v, want fake CUDA device, 2 GiB, 1 GiB free", info)
	}
	t.Logf("%+v", info)
}

// The registry's device list of "cuda" is every GPU the driver sees, as
// Probe reads it; without a driver it is Available's error (the library
// paths tried), with no device listed.
func TestGPUDevices(t *testing.T) {
	devs, err := backend.DevicesOf(Name)
	b, lerr := backend.Lookup(Name)
	if lerr != nil {
		t.Fatal(lerr)
	}
	drv, derr := Driver()
	if derr != nil || drv.Devices == 0 {
		avail := b.Available()
		if err == nil || avail == nil || err.Error() != avail.Error() || len(devs) != 0 {
			t.Fatalf("without a GPU: Devices = %+v, %v; want no device and Available's error %v", devs, err, avail)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != drv.Devices {
		t.Fatalf("Devices lists %d GPUs, the driver sees %d", len(devs), drv.Devices)
	}
	p, err := Probe(0)
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	if d.Backend != Name || d.ID != "0" || d.Kind != backend.KindGPU || d.Name != p.Name || d.TotalBytes != int64(p.TotalBytes) ||
		d.FreeBytes <= 0 || d.FreeBytes > d.TotalBytes || d.ComputeMajor != p.Major || d.ComputeMinor != p.Minor || d.MemorySource != "cuMemGetInfo" {
		t.Errorf("device 0: %+v; Probe(0) = %+v", d, p)
	}
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") == "1" && (d.Name != "fake CUDA device" || d.TotalBytes != 2<<30 || d.FreeBytes != 1<<30) {
		t.Errorf("the stand-in driver's device: %+v, want fake CUDA device, 2 GiB, 1 GiB free", d)
	}
	t.Logf("%+v", devs)
}

// DecoderMemory is the device memory a decoder of the model allocates, in
// float32 and in bfloat16.
func TestGPUDecoderMemory(t *testing.T) {
	dv := ownGPU(t)
	b, err := backend.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3"} {
		for _, bf16 := range []bool{false, true} {
			m := fixtureModel(t, name, 9)
			must(t, dv.ReleaseScratch())
			live0, _ := dv.MemStats()
			newDec := dv.NewDecoder
			if bf16 {
				newDec = dv.NewDecoderBF16
			}
			dec, err := newDec(m)
			must(t, err)
			live1, _ := dv.MemStats()
			must(t, dec.Close())
			host, dev := b.DecoderMemory(m.Config(), bf16)
			if got := int64(live1 - live0); host != 0 || dev != got {
				t.Errorf("%s (bf16 %v): DecoderMemory = %d host, %d device; the decoder allocated %d bytes of device memory", name, bf16, host, dev, got)
			}
		}
	}
}
