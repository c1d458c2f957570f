//go:build !(linux || darwin || openbsd)

package vfs

// ReadAtv reads one buffer at a time on this platform.
func (f osFile) ReadAtv(bufs [][]byte, off int64) (int, error) { return ReadAtvLoop(f, bufs, off) }

// WriteAtv writes one buffer at a time on this platform.
func (f osFile) WriteAtv(bufs [][]byte, off int64) (int, error) { return WriteAtvLoop(f, bufs, off) }
