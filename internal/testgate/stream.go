package testgate

import (
	"bufio"
	"fmt"
	"io"
)

// Consume feeds every line of r to the gate. Lines of any length are
// handled (test2json splits long output, but text beside the stream may be
// long too).
func (g *Gate) Consume(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			g.Line(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the go test stream: %w", err)
		}
	}
}
