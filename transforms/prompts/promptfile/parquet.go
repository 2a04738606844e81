package promptfile

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/parquet-go/parquet-go"
)

// parquetBatch is the number of rows decoded per read.
const parquetBatch = 256

// parquet reads a Parquet file row by row into generic records, so that any
// schema (flat columns, nested structs, lists) goes through the same
// mapping as JSON.
func (r *reader) parquet(ctx context.Context) error {
	ra, err := storage.OpenReaderAt(ctx, r.src.Path)
	if err != nil {
		return fmt.Errorf("open prompt file %s: %w", r.src.Path, err)
	}
	defer ra.Close()
	f, err := parquet.OpenFile(ra, ra.Size())
	if err != nil {
		return fmt.Errorf("prompt file %s is not a readable Parquet file: %w", r.src.Path, err)
	}
	schema := f.Schema()
	buf := make([]parquet.Row, parquetBatch)
	var index int64
	for gi, rg := range f.RowGroups() {
		rows := rg.Rows()
		for {
			n, err := rows.ReadRows(buf)
			for i := 0; i < n; i++ {
				obj := map[string]any{}
				if rerr := schema.Reconstruct(&obj, buf[i]); rerr != nil {
					if ferr := r.fail(0, index, rowError{ReasonBadRow, fmt.Sprintf("row cannot be decoded: %v", rerr)}, nil); ferr != nil {
						rows.Close()
						return ferr
					}
				} else if path, ok := validUTF8(obj, ""); !ok {
					if ferr := r.fail(0, index, rowError{ReasonInvalidUTF8, fmt.Sprintf("column %s is not valid UTF-8", path)}, nil); ferr != nil {
						rows.Close()
						return ferr
					}
				} else if perr := r.object(obj, 0, index, nil); perr != nil {
					rows.Close()
					return perr
				}
				index++
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rows.Close()
				return fmt.Errorf("read prompt file %s, row group %d: %w", r.src.Path, gi, err)
			}
			if n == 0 {
				break
			}
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("read prompt file %s, row group %d: %w", r.src.Path, gi, err)
		}
	}
	return nil
}
