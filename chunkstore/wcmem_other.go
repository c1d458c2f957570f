//go:build !linux

package chunkstore

// wcSlab is the write cache's allocation unit.
const wcSlab = 2 << 20

// newSlab allocates a slab from the Go heap.
func newSlab() (b []byte, mapped bool) { return make([]byte, wcSlab), false }

// freeSlab gives a slab back to the collector.
func freeSlab([]byte, bool) {}
