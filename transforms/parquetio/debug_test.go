package parquetio

import (
	"context"
	"testing"

	"github.com/aipo-rl/aipo/internal/storage"
)

func TestDebugGCS(t *testing.T) {
	ctx := context.Background()
	p := "gs://" + testBucket + "/dbg/a/_MANIFEST.json"
	err := storage.WriteAtomic(ctx, p, []byte("hello"))
	t.Logf("write: %v", err)
	b, err := storage.ReadFile(ctx, p)
	t.Logf("read: %q %v", b, err)
	objs, _, err := fakeGCS.ListObjects(testBucket, "", "", false)
	for _, o := range objs {
		t.Logf("obj %s %d", o.Name, o.Size)
	}
	t.Logf("list err %v", err)
}
