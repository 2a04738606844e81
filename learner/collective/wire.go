package collective

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// The store's wire format, over one TCP connection per client, one request
// at a time:
//
//	request:  op u8, timeout_ms u32, nargs u16, nargs × (len u32, bytes)
//	response: status u8, nvals u16, nvals × (len u32, bytes)
//
// Integers are big-endian. Status statusTimeout carries the keys still
// missing; statusError carries one message.
const (
	opSet    = 1 // key, value
	opGet    = 2 // key; waits for it up to timeout_ms
	opWait   = 3 // keys...; waits for all up to timeout_ms
	opAdd    = 4 // key, decimal delta; returns the new decimal value
	opHello  = 5 // rank, world size (decimal); binds the connection to the rank
	opBeat   = 6 // heartbeat of the bound rank
	opLeave  = 7 // the bound rank closes cleanly
	opHealth = 8 // returns JSON []healthEntry
	opDelete = 9 // key

	statusOK      = 0
	statusTimeout = 1
	statusError   = 2

	maxField  = 256 << 20 // the largest key or value
	maxFields = 1 << 16
)

func writeFrame(w *bufio.Writer, head []byte, fields [][]byte) error {
	if len(fields) >= maxFields {
		return fmt.Errorf("store: %d fields in one message (at most %d)", len(fields), maxFields-1)
	}
	var n [4]byte
	w.Write(head)
	binary.BigEndian.PutUint16(n[:2], uint16(len(fields)))
	w.Write(n[:2])
	for _, f := range fields {
		if len(f) > maxField {
			return fmt.Errorf("store: a field of %d bytes (at most %d)", len(f), maxField)
		}
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		w.Write(n[:])
		w.Write(f)
	}
	return w.Flush()
}

func readFields(r *bufio.Reader) ([][]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:2]); err != nil {
		return nil, err
	}
	fields := make([][]byte, binary.BigEndian.Uint16(n[:2]))
	for i := range fields {
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		l := binary.BigEndian.Uint32(n[:])
		if l > maxField {
			return nil, fmt.Errorf("store: a field of %d bytes (at most %d)", l, maxField)
		}
		fields[i] = make([]byte, l)
		if _, err := io.ReadFull(r, fields[i]); err != nil {
			return nil, err
		}
	}
	return fields, nil
}
