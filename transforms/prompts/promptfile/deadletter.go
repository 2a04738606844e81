package promptfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/aipo-rl/aipo/internal/storage"
)

// DeadLetterWriter writes dead letters as JSONL, one object per line, to a
// local path or gs://. The file appears (on gs://) or is durable (locally)
// when Close returns.
type DeadLetterWriter struct {
	path string
	w    storage.Writer
	n    int64
}

// NewDeadLetterWriter creates the dead-letter file at path.
func NewDeadLetterWriter(ctx context.Context, path string) (*DeadLetterWriter, error) {
	w, err := storage.Create(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("create dead-letter file %s: %w", path, err)
	}
	return &DeadLetterWriter{path: path, w: w}, nil
}

// Write appends one dead letter.
func (d *DeadLetterWriter) Write(l DeadLetter) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return fmt.Errorf("encode dead letter for %s: %w", l.File, err)
	}
	if _, err := d.w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write dead-letter file %s: %w", d.path, err)
	}
	d.n++
	return nil
}

// Count is the number of dead letters written.
func (d *DeadLetterWriter) Count() int64 { return d.n }

// Close finishes the file.
func (d *DeadLetterWriter) Close() error {
	if err := d.w.Close(); err != nil {
		return fmt.Errorf("close dead-letter file %s: %w", d.path, err)
	}
	return nil
}

// WriteDeadLetters writes all of ls to path as JSONL.
func WriteDeadLetters(ctx context.Context, path string, ls []DeadLetter) error {
	w, err := NewDeadLetterWriter(ctx, path)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if err := w.Write(l); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// ReadDeadLetters reads a dead-letter file written by DeadLetterWriter.
func ReadDeadLetters(ctx context.Context, path string) ([]DeadLetter, error) {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read dead-letter file %s: %w", path, err)
	}
	var out []DeadLetter
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l DeadLetter
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("dead-letter file %s line %d: %w", path, i+1, err)
		}
		out = append(out, l)
	}
	return out, nil
}
