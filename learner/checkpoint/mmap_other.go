//go:build !unix

package checkpoint

import "os"

// mappedFile reads a local file with pread where memory maps are not
// available.
type mappedFile struct {
	*os.File
	size int64
}

func openMapped(path string) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &mappedFile{File: f, size: st.Size()}, nil
}

func (m *mappedFile) Size() int64 { return m.size }
