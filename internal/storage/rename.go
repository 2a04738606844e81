package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
)

// Rename moves src to dst, replacing dst if it exists. Both must be on the
// same scheme. Locally it is os.Rename (atomic within one filesystem) followed
// by a sync of dst's directory; on object stores it is the filesystem's
// rename (on gs:// a server-side copy, then a delete of src), so dst appears
// whole or not at all.
func Rename(ctx context.Context, src, dst string) error {
	if IsRemote(src) != IsRemote(dst) {
		return fmt.Errorf("storage: rename %s to %s: source and destination are on different filesystems", src, dst)
	}
	if !IsRemote(src) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		if err := SyncDir(filepath.Dir(dst)); err != nil {
			return err
		}
		Changed(dst)
		return nil
	}
	return bounded(ctx, "rename", src+" to "+dst, func(ctx context.Context) error {
		fs, err := remoteFS(ctx, src)
		if err != nil {
			return err
		}
		defer fs.Close()
		if err := filesystem.Rename(ctx, fs, src, dst); err != nil {
			return wrapRemote("rename", src+" to "+dst, err)
		}
		Changed(dst)
		return nil
	})
}
