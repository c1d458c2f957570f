//go:build !linux

package iwarp

import "io"

// readvInto fills p from the socket (see readv_linux.go); elsewhere with
// plain reads. The buffer must be empty.
func (d *rxReader) readvInto(p []byte) error {
	d.r, d.w = 0, 0
	_, err := io.ReadFull(d.conn, p)
	return err
}

type readvState struct{}
