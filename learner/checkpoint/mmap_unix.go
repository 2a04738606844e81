//go:build unix

package checkpoint

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mappedFile is a local file mapped read-only into memory: reads copy
// from the mapping and then drop the pages they consumed from the
// process (madvise MADV_DONTNEED; the kernel's page cache keeps them), so
// that reading a file of weights once, front to back or tensor by tensor,
// holds a few pages of it at a time rather than the whole file.
type mappedFile struct {
	data []byte
}

// openMapped maps the local file at path.
func openMapped(path string) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return &mappedFile{}, nil
	}
	if st.Size() != int64(int(st.Size())) {
		return nil, fmt.Errorf("map %s: %d bytes do not fit the address space", path, st.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &mappedFile{data: data}, nil
}

// ReadAt copies from the mapping (io.ReaderAt) and drops the whole pages
// the range covers.
func (m *mappedFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("checkpoint: read at negative offset %d", off)
	}
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	m.drop(off, int64(n))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// drop releases the pages wholly inside [off, off+n).
func (m *mappedFile) drop(off, n int64) {
	page := int64(os.Getpagesize())
	lo := (off + page - 1) / page * page
	hi := (off + n) / page * page
	if hi > lo {
		unix.Madvise(m.data[lo:hi], unix.MADV_DONTNEED) // advice: a failure costs memory, not correctness
	}
}

// Size is the file's size.
func (m *mappedFile) Size() int64 { return int64(len(m.data)) }

// Close unmaps the file.
func (m *mappedFile) Close() error {
	if m.data == nil {
		return nil
	}
	err := unix.Munmap(m.data)
	m.data = nil
	return err
}
