package shm

import (
	"encoding/binary"
	"os"
)

// eventFD is the doorbell the provider does not use, kept for
// BenchmarkDoorbell: an eventfd whose reader parks in the Go netpoller
// instead of a thread in futex(2).
type eventFD struct{ f *os.File }

func newEventFD(fd int) *eventFD { return &eventFD{os.NewFile(uintptr(fd), "eventfd")} }

func (e *eventFD) post() {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	e.f.Write(b[:])
}

// wait blocks until the counter is nonzero and resets it; false once closed.
func (e *eventFD) wait() bool {
	var b [8]byte
	_, err := e.f.Read(b[:])
	return err == nil
}

func (e *eventFD) Close() error { return e.f.Close() }
