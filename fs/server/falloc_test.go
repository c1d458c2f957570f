package server

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// TestFallocateModes runs random writes, truncates and every FALLOCATE
// mode on one file against a byte-slice model of it (Linux's rules for
// zero range, collapse and insert), across inline data, block and chunk
// boundaries, and checks the bytes, the size and the server's
// invariants after each step.
func TestFallocateModes(t *testing.T) {
	s := newServer(t, testOptions())
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	defer s.release(f.Ino, h)
	ino := f.Ino
	var model []byte
	rng := rand.New(rand.NewPCG(11, 12))
	grow := func(n int64) {
		if int64(len(model)) < n {
			model = append(model, make([]byte, n-int64(len(model)))...)
		}
	}
	zero := func(off, end int64) {
		end = min(end, int64(len(model)))
		if off < end {
			clear(model[off:end])
		}
	}
	const span = 40 << 10
	var done [7]int
	for step := range 600 {
		op := rng.IntN(7)
		off, length := rng.Int64N(span), 1+rng.Int64N(12<<10)
		var want error
		switch op {
		case 0: // write
			data := make([]byte, length)
			for i := range data {
				data[i] = byte(rng.Uint32() | 1)
			}
			_, err = s.write(rootCred, ino, off, data, false)
			grow(off + length)
			copy(model[off:], data)
		case 1: // truncate
			n := rng.Int64N(span)
			_, err = s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetSize, Size: uint64(n)})
			if n < int64(len(model)) {
				model = model[:n]
			} else {
				grow(n)
			}
		case 2: // punch
			err = s.fallocate(rootCred, ino, proto.FallocPunch|proto.FallocKeep, off, length)
			zero(off, off+length)
		case 3, 4: // zero range, keeping the size or not
			mode := uint32(proto.FallocZero)
			if op == 3 {
				mode |= proto.FallocKeep
			}
			err = s.fallocate(rootCred, ino, mode, off, length)
			zero(off, off+length)
			if op == 4 {
				grow(off + length)
			}
		case 5: // collapse
			off, length = off&^(rangeBlock-1), (length+rangeBlock-1)&^(rangeBlock-1)
			err = s.fallocate(rootCred, ino, proto.FallocCollapse, off, length)
			if off+length >= int64(len(model)) {
				want = syscall.EINVAL
			} else {
				model = append(model[:off], model[off+length:]...)
			}
		case 6: // insert
			off, length = off&^(rangeBlock-1), (length+rangeBlock-1)&^(rangeBlock-1)
			err = s.fallocate(rootCred, ino, proto.FallocInsert, off, length)
			if off >= int64(len(model)) {
				want = syscall.EINVAL
			} else {
				model = append(model[:off], append(make([]byte, length), model[off:]...)...)
			}
		}
		if want != nil {
			requireErrno(t, want.(syscall.Errno), err, "step %d op %d", step, op)
		} else {
			require.NoError(t, err, "step %d op %d", step, op)
			done[op]++
		}
		a, err := s.getAttr(ino)
		require.NoError(t, err)
		require.Equal(t, uint64(len(model)), a.Size, "step %d op %d: size", step, op)
		got := make([]byte, len(model)+1)
		n, err := s.read(rootCred, ino, 0, got)
		require.NoError(t, err)
		require.Equal(t, len(model), n, "step %d", step)
		require.True(t, bytes.Equal(model, got[:n]), "step %d op %d off %d len %d: content", step, op, off, length)
	}
	checkInvariants(t, s)
	for op, n := range done {
		require.Greater(t, n, 20, "op %d ran %d times", op, n)
	}

	requireErrno(t, syscall.EINVAL, s.fallocate(rootCred, ino, proto.FallocCollapse, 100, rangeBlock), "unaligned")
	requireErrno(t, syscall.EINVAL, s.fallocate(rootCred, ino, proto.FallocInsert, 0, 100), "unaligned")
	requireErrno(t, syscall.EOPNOTSUPP, s.fallocate(rootCred, ino, 0x40, 0, rangeBlock), "unshare")
}

// TestCopyRange: COPYRANGE copies between files and within one, across
// inline data and chunks, stops at the source's end, refuses
// overlapping ranges of one file, and holds its caller to read access
// on the source.
func TestCopyRange(t *testing.T) {
	s := newServer(t, testOptions())
	src, hs, err := s.create(rootCred, root, []byte("src"), 0o600, 0, 0, 0)
	require.NoError(t, err)
	defer s.release(src.Ino, hs)
	dst, hd, err := s.create(rootCred, root, []byte("dst"), 0o666, 0, 0, 0)
	require.NoError(t, err)
	defer s.release(dst.Ino, hd)
	data := make([]byte, 30000)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	_, err = s.write(rootCred, src.Ino, 0, data, false)
	require.NoError(t, err)
	read := func(ino uint64) []byte {
		a, err := s.getAttr(ino)
		require.NoError(t, err)
		b := make([]byte, a.Size)
		n, err := s.read(rootCred, ino, 0, b)
		require.NoError(t, err)
		return b[:n]
	}

	n, err := s.copyRange(rootCred, src.Ino, 1000, dst.Ino, 300, 20000)
	require.NoError(t, err)
	require.Equal(t, 20000, n)
	want := append(make([]byte, 300), data[1000:21000]...)
	require.Equal(t, want, read(dst.Ino))

	n, err = s.copyRange(rootCred, src.Ino, 25000, dst.Ino, 0, 100000)
	require.NoError(t, err)
	require.Equal(t, 5000, n, "stops at the source's end")
	copy(want, data[25000:])
	require.Equal(t, want, read(dst.Ino))

	n, err = s.copyRange(rootCred, src.Ino, 35000, dst.Ino, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 0, n, "nothing from past the source's end")
	n, err = s.copyRange(rootCred, src.Ino, 0, src.Ino, 30000, 100)
	require.NoError(t, err)
	require.Equal(t, 100, n, "within one file")
	require.Equal(t, data[:100], read(src.Ino)[30000:])
	_, err = s.copyRange(rootCred, src.Ino, 0, src.Ino, 50, 100)
	requireErrno(t, syscall.EINVAL, err, "overlapping")

	_, err = s.copyRange(bob, src.Ino, 0, dst.Ino, 0, 10)
	requireErrno(t, syscall.EACCES, err, "the source is 0600, root's")
	checkInvariants(t, s)
}
