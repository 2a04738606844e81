package cuda

import (
	"os"
	"strings"
	"testing"
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
