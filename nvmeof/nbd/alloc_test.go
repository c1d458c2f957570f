package nbd

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoAllocationsPerRequest checks that, once warm, a write and a read
// through the server allocate nothing anywhere in the process: the ops,
// the data buffers (pooled), the reader and the writer. The race
// detector allocates on its own, so the check runs without it (make
// allocs).
func TestNoAllocationsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; make allocs runs this without it")
	}
	mem := newMem(1 << 20)
	s := &Server{Exports: []Export{mem.export("", 512)}}
	c := dial(t, testServer(t, s))
	c.open("", false)
	nc := c.nc
	write, _ := (&Request{Type: CmdWrite, Cookie: 1, Offset: 8192, Length: 4096}).MarshalBinary()
	write = append(write, make([]byte, 4096)...)
	read, _ := (&Request{Type: CmdRead, Cookie: 2, Offset: 8192, Length: 4096}).MarshalBinary()
	reply := make([]byte, SimpleReplySize+4096)
	roundTrip := func(nc net.Conn) {
		if _, err := nc.Write(write); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, reply[:SimpleReplySize]); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(read); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, reply); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		roundTrip(nc)
	}
	allocs := testing.AllocsPerRun(500, func() { roundTrip(nc) })
	require.Zero(t, allocs, "allocations per write and read")
}
